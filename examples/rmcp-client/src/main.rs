//! An MCP client on rmcp with the policy embedded through `mcpolicy-rmcp`:
//! it starts a server, calls one of its tools, and every
//! `sampling/createMessage` the server sends meanwhile is decided by the
//! compiled policy. See `README.md`.
#![expect(
    deprecated,
    reason = "sampling/createMessage is what this example answers"
)]

use std::process::{ExitCode, Stdio};
use std::sync::Arc;

use mcpolicy_rmcp::{
    Completion, ConsentPrompt, ConsentRequest, PolicyClient, Provider, ProviderError,
};
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::SqliteStore;
use mcpolicy_runtime::{Engine, Policy};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CreateMessageRequestParams, CreateMessageResult, SamplingMessage,
};

const USAGE: &str = "usage: rmcp-client TABLE STORE SERVER TOOL -- COMMAND [ARG...]
  TABLE    the compiled policy (`mcpc compile policy.mcpolicy -o TABLE`)
  STORE    the SQLite decision store (created if missing)
  SERVER   the server's name, as the policy's `server \"…\"` blocks know it
  TOOL     the tool to call
  COMMAND  the server, run with its stdio piped to this client";

/// Your model call goes here: this one answers every request with the same
/// text and bills nothing.
struct Canned;

impl Provider for Canned {
    async fn complete(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<Completion, ProviderError> {
        eprintln!(
            "model: {} message(s), maxTokens {}",
            params.messages.len(),
            params.max_tokens
        );
        Ok(Completion {
            result: CreateMessageResult::new(
                SamplingMessage::assistant_text("(a completion)"),
                "canned".to_owned(),
            ),
            usage_tokens: 0,
        })
    }
}

/// Your consent dialog goes here: this one asks on the terminal.
struct Terminal;

impl ConsentPrompt for Terminal {
    async fn ask(&self, request: ConsentRequest) -> bool {
        eprint!(
            "`{}` asks for a completion ({} message(s)). Allow? [y/N] ",
            request.server_id,
            request.params.messages.len()
        );
        let answer = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await;
        matches!(answer, Ok(Ok(line)) if line.trim().eq_ignore_ascii_case("y"))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(sep), true) = (args.iter().position(|a| a == "--"), args.len() > 5) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let [table, store, server, tool] = &args[..sep] else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(table, store, server, tool, &args[sep + 1..]).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rmcp-client: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    table: &str,
    store: &str,
    server: &str,
    tool: &str,
    command: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    // A bad table fails closed here; the store survives restarts.
    let policy = Policy::from_json(&std::fs::read(table)?)?;
    let engine = Engine::new(
        policy,
        Arc::new(SqliteStore::open(store)?),
        Arc::new(SystemClock),
    );
    let client = PolicyClient::new(engine, server, Canned, Terminal);

    let (program, rest) = command.split_first().ok_or(USAGE)?;
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the server's stdio is not piped".into());
    };
    let session = client.clone().serve((stdout, stdin)).await?;
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    eprintln!("{:?}", client.stats());
    session.cancel().await?;
    Ok(())
}
