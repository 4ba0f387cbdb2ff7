//! Stand-ins for the two things a real client supplies: the LLM call and the
//! consent dialog. Both count what they were asked, so tests can prove that a
//! denied request cost nothing and asked the user once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, SamplingMessage};

use crate::{Completion, ConsentPrompt, ConsentRequest, Provider, ProviderError};

/// A provider that answers every request with the same text, reports a fixed
/// token usage, and records what it was asked.
#[derive(Debug)]
pub struct FakeProvider {
    text: String,
    model: String,
    usage_tokens: u64,
    delay: Option<Duration>,
    calls: AtomicU64,
    seen: Mutex<Vec<CreateMessageRequestParams>>,
}

impl FakeProvider {
    /// Answers `text` from model `fake-model`, billing `usage_tokens` per call.
    pub fn new(text: impl Into<String>, usage_tokens: u64) -> Self {
        FakeProvider {
            text: text.into(),
            model: "fake-model".to_owned(),
            usage_tokens,
            delay: None,
            calls: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Answers as model `model` (the result's `model`).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Takes `delay` (tokio time) before answering: a slow model.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// How many completions were started.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// The params of every call, in order (as the policy let them run).
    pub fn seen(&self) -> Vec<CreateMessageRequestParams> {
        match self.seen.lock() {
            Ok(seen) => seen.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl Provider for FakeProvider {
    async fn complete(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<Completion, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.seen.lock() {
            Ok(mut seen) => seen.push(params),
            Err(poisoned) => poisoned.into_inner().push(params),
        }
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        Ok(Completion {
            result: CreateMessageResult::new(
                SamplingMessage::assistant_text(self.text.clone()),
                self.model.clone(),
            )
            .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN),
            usage_tokens: self.usage_tokens,
        })
    }
}

/// A user who always gives the same answer, and how often they were asked.
#[derive(Debug)]
pub struct ScriptedConsent {
    answer: bool,
    prompts: AtomicU64,
    asked: Mutex<Vec<ConsentRequest>>,
}

impl ScriptedConsent {
    /// A user who approves everything.
    pub fn approve() -> Self {
        Self::answering(true)
    }

    /// A user who refuses everything.
    pub fn deny() -> Self {
        Self::answering(false)
    }

    fn answering(answer: bool) -> Self {
        ScriptedConsent {
            answer,
            prompts: AtomicU64::new(0),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// How many consent dialogs were shown.
    pub fn prompts(&self) -> u64 {
        self.prompts.load(Ordering::SeqCst)
    }

    /// Every dialog shown, in order.
    pub fn asked(&self) -> Vec<ConsentRequest> {
        match self.asked.lock() {
            Ok(asked) => asked.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ConsentPrompt for ScriptedConsent {
    async fn ask(&self, request: ConsentRequest) -> bool {
        self.prompts.fetch_add(1, Ordering::SeqCst);
        match self.asked.lock() {
            Ok(mut asked) => asked.push(request),
            Err(poisoned) => poisoned.into_inner().push(request),
        }
        self.answer
    }
}
