//! Reading audit lines and summing them up per server.

use std::collections::{BTreeMap, HashMap};

use mcpolicy_runtime::clock::{format_rfc3339, parse_rfc3339};
use mcpolicy_runtime::store::Millis;
use serde::Serialize;
use serde_json::Value;

/// Time buckets of the charts.
pub const BUCKETS: usize = 24;
/// How many reasons, loops and represented counts a server lists.
const TOP: usize = 5;
/// At or above this trimmed percentage a server is flagged.
pub const WIDE_PERCENT: f64 = 90.0;

/// A line that could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct Malformed {
    /// The file.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// Why.
    pub error: String,
}

/// A requested value against the applied one.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Gap {
    /// What the server asked for.
    pub requested: Value,
    /// What it got.
    pub applied: Value,
    /// How often.
    pub times: u64,
}

/// One trim: what was asked and what ran.
#[derive(Debug, Clone, Serialize)]
pub struct Trim {
    /// When.
    pub time: String,
    /// The request id.
    pub id: Value,
    /// The `_meta` notes (`context`, `maxTokens`, `model`).
    pub notes: Value,
}

/// An identity in a retry loop.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RetryLoop {
    /// The identity.
    pub identity: String,
    /// Retry-loop alerts raised for it.
    pub alerts: u64,
    /// The highest re-presentation count of an alert's window.
    pub max_count: u64,
    /// The highest `represented` seen, on alerts or denials.
    pub represented: u64,
    /// The first alert.
    pub first_alert: Option<String>,
}

/// A trim alert.
#[derive(Debug, Clone, Serialize)]
pub struct TrimAlert {
    /// When.
    pub time: String,
    /// Trimmed decisions in the window.
    pub trimmed: u64,
    /// Decisions in the window.
    pub calls: u64,
    /// What the request that raised it asked for against what it got.
    pub gap: Value,
}

/// Consent prompts and their answers.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Consent {
    /// Requests forwarded for the user to decide.
    pub prompts: u64,
    /// Answered yes.
    pub approved: u64,
    /// Answered no.
    pub refused: u64,
    /// Neither: the client failed the request (an error other than the
    /// user's -1), its task ended without the user's word, or recording
    /// the approval failed. Nothing was stored.
    pub failed: u64,
    /// Not answered when the proxy's session ended: nothing stored, the
    /// budget and the prompt stay counted.
    pub unanswered: u64,
}

/// One time bucket of a server's chart.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Bucket {
    /// Decisions allowed as sent.
    pub allow: u64,
    /// Decisions trimmed.
    pub trim: u64,
    /// Decisions denied.
    pub deny: u64,
    /// Decisions forwarded for consent.
    pub consent: u64,
}

/// Everything about one server.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ServerReport {
    /// The server id.
    pub server: String,
    /// Decision lines (`event: decision`).
    pub decisions: u64,
    /// Their outcomes.
    pub outcomes: BTreeMap<String, u64>,
    /// Of the decisions, how many were narrowed (trims, and consents shown narrowed).
    pub trimmed: u64,
    /// `trimmed` as a percentage of `decisions`.
    pub trimmed_percent: f64,
    /// Answered from the store.
    pub replayed: u64,
    /// Denial and trim reasons, most frequent first.
    pub reasons: Vec<(String, u64)>,
    /// The widest `maxTokens` requested (and what was applied to it).
    pub widest_max_tokens: Option<Gap>,
    /// Requested against applied, per kind (`includeContext`, `maxTokens`,
    /// `model`), most frequent first.
    pub gaps: BTreeMap<String, Vec<Gap>>,
    /// Every trim, in order.
    pub trims: Vec<Trim>,
    /// Identities in retry loops (alerted), then the highest represented counts.
    pub retry_loops: Vec<RetryLoop>,
    /// Trim alerts.
    pub trim_alerts: Vec<TrimAlert>,
    /// Consent prompts.
    pub consent: Consent,
    /// Deadline misses.
    pub deadline_misses: u64,
    /// `invalid` and `error` lines.
    pub errors: u64,
    /// Decisions per time bucket.
    pub timeline: Vec<Bucket>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The files read.
    pub files: Vec<String>,
    /// Lines read (blank lines excluded).
    pub lines: usize,
    /// Lines within `--since`/`--until`.
    pub counted: usize,
    /// Lines outside them.
    pub outside: usize,
    /// `--since`.
    pub since: Option<String>,
    /// `--until`.
    pub until: Option<String>,
    /// The first counted line's time.
    pub first: Option<String>,
    /// The last counted line's time.
    pub last: Option<String>,
    /// The start of each chart bucket.
    pub buckets: Vec<String>,
    /// Per server, the most trimmed first, then by name.
    pub servers: Vec<ServerReport>,
    /// Lines that could not be read.
    pub malformed: Vec<Malformed>,
}

/// One readable line.
struct Line {
    time: Millis,
    server: String,
    value: Value,
}

/// Reads files, then sums up.
pub struct Builder {
    since: Option<Millis>,
    until: Option<Millis>,
    files: Vec<String>,
    lines: usize,
    outside: usize,
    read: Vec<Line>,
    malformed: Vec<Malformed>,
}

fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn check_line(value: &Value) -> Result<(Millis, String), String> {
    let Value::Object(map) = value else {
        return Err("not a JSON object".to_owned());
    };
    let time = map.get("time").and_then(Value::as_str).ok_or("no `time`")?;
    let time = parse_rfc3339(time).ok_or_else(|| format!("`time` {time:?} is not RFC 3339"))?;
    let event = map
        .get("event")
        .and_then(Value::as_str)
        .ok_or("no `event`")?;
    if !matches!(
        event,
        "decision" | "consent" | "deadline" | "invalid" | "error" | "alert"
    ) {
        return Err(format!("unknown event {event:?}"));
    }
    let server = map
        .get("server")
        .and_then(Value::as_str)
        .ok_or("no `server`")?;
    if event == "alert" && !map.get("alert").is_some_and(Value::is_object) {
        return Err("an alert line without `alert`".to_owned());
    }
    if event != "alert" && !map.get("outcome").is_some_and(Value::is_string) {
        return Err("no `outcome`".to_owned());
    }
    Ok((time, server.to_owned()))
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_owned()).or_default() += 1;
}

fn add_gap(gaps: &mut Vec<Gap>, requested: &Value, applied: &Value) {
    match gaps
        .iter_mut()
        .find(|g| &g.requested == requested && &g.applied == applied)
    {
        Some(gap) => gap.times += 1,
        None => gaps.push(Gap {
            requested: requested.clone(),
            applied: applied.clone(),
            times: 1,
        }),
    }
}

impl Builder {
    /// A builder keeping lines in `[since, until)`.
    pub fn new(since: Option<Millis>, until: Option<Millis>) -> Self {
        Builder {
            since,
            until,
            files: Vec::new(),
            lines: 0,
            outside: 0,
            read: Vec::new(),
            malformed: Vec::new(),
        }
    }

    /// Reads one file's bytes.
    pub fn read(&mut self, file: &str, bytes: &[u8]) {
        self.files.push(file.to_owned());
        for (n, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.lines += 1;
            let parsed = serde_json::from_slice::<Value>(raw)
                .map_err(|e| format!("not JSON: {e}"))
                .and_then(|value| check_line(&value).map(|(time, server)| (time, server, value)));
            match parsed {
                Ok((time, server, value)) => {
                    if self.since.is_some_and(|s| time < s) || self.until.is_some_and(|u| time >= u)
                    {
                        self.outside += 1;
                        continue;
                    }
                    self.read.push(Line {
                        time,
                        server,
                        value,
                    });
                }
                Err(error) => self.malformed.push(Malformed {
                    file: file.to_owned(),
                    line: n + 1,
                    error,
                }),
            }
        }
    }

    /// The report.
    pub fn finish(mut self) -> Report {
        self.read.sort_by_key(|l| l.time);
        let first = self.read.first().map(|l| l.time);
        let last = self.read.last().map(|l| l.time);
        let (start, width) = match (first, last) {
            (Some(first), Some(last)) => {
                let span = (last - first).max(1);
                (first, (span / BUCKETS as i64) + 1)
            }
            _ => (0, 1),
        };
        let bucket_of = |time: Millis| (((time - start) / width) as usize).min(BUCKETS - 1);
        let mut servers: BTreeMap<String, ServerReport> = BTreeMap::new();
        let mut reasons: HashMap<String, BTreeMap<String, u64>> = HashMap::new();
        let mut loops: HashMap<String, BTreeMap<String, RetryLoop>> = HashMap::new();
        for line in &self.read {
            let server = servers
                .entry(line.server.clone())
                .or_insert_with(|| ServerReport {
                    server: line.server.clone(),
                    timeline: vec![Bucket::default(); BUCKETS],
                    ..ServerReport::default()
                });
            let v = &line.value;
            let event = v["event"].as_str().unwrap_or_default();
            let outcome = v["outcome"].as_str().unwrap_or_default();
            let reasons = reasons.entry(line.server.clone()).or_default();
            let loops = loops.entry(line.server.clone()).or_default();
            let time = format_rfc3339(line.time);
            match event {
                "decision" => {
                    server.decisions += 1;
                    bump(&mut server.outcomes, outcome);
                    let bucket = &mut server.timeline[bucket_of(line.time)];
                    match outcome {
                        "allow" => bucket.allow += 1,
                        "trim" => bucket.trim += 1,
                        "deny" => bucket.deny += 1,
                        _ => bucket.consent += 1,
                    }
                    if v["replayed"] == Value::Bool(true) {
                        server.replayed += 1;
                    }
                    if outcome == "consent" {
                        server.consent.prompts += 1;
                    }
                }
                "consent" => match outcome {
                    "deny" => server.consent.refused += 1,
                    "failed" => server.consent.failed += 1,
                    "unanswered" => server.consent.unanswered += 1,
                    _ => server.consent.approved += 1,
                },
                "deadline" => server.deadline_misses += 1,
                "invalid" | "error" => server.errors += 1,
                _ => {}
            }
            if let Some(reason) = v.get("reason").and_then(Value::as_str) {
                bump(reasons, reason);
            }
            if let (Some(identity), Some(represented)) = (
                string(v, "identity"),
                v.get("represented").and_then(Value::as_u64),
            ) && represented > 0
            {
                let entry = loops.entry(identity.clone()).or_insert_with(|| RetryLoop {
                    identity,
                    ..RetryLoop::default()
                });
                entry.represented = entry.represented.max(represented);
            }
            if event == "decision"
                && let Some(notes) = v.get("trims").and_then(Value::as_object)
            {
                server.trimmed += 1;
                for reason in v["reasons"].as_array().into_iter().flatten() {
                    if let Some(reason) = reason.as_str() {
                        bump(reasons, reason);
                    }
                }
                for (kind, note) in notes {
                    let requested = &note["requested"];
                    let applied = &note["applied"];
                    add_gap(
                        server.gaps.entry(kind.clone()).or_default(),
                        requested,
                        applied,
                    );
                    if kind == "maxTokens" {
                        let wider = server.widest_max_tokens.as_ref().is_none_or(|w| {
                            requested.as_u64().unwrap_or(0) > w.requested.as_u64().unwrap_or(0)
                        });
                        if wider {
                            server.widest_max_tokens = Some(Gap {
                                requested: requested.clone(),
                                applied: applied.clone(),
                                times: 1,
                            });
                        }
                    }
                }
                server.trims.push(Trim {
                    time: time.clone(),
                    id: v["id"].clone(),
                    notes: Value::Object(notes.clone()),
                });
            }
            if event == "alert" {
                let alert = &v["alert"];
                match alert["kind"].as_str() {
                    Some("retries") => {
                        let identity = string(v, "identity").unwrap_or_default();
                        let entry = loops.entry(identity.clone()).or_insert_with(|| RetryLoop {
                            identity,
                            ..RetryLoop::default()
                        });
                        entry.alerts += 1;
                        entry.max_count = entry.max_count.max(alert["count"].as_u64().unwrap_or(0));
                        entry.represented = entry
                            .represented
                            .max(alert["represented"].as_u64().unwrap_or(0));
                        entry.first_alert.get_or_insert(time.clone());
                    }
                    Some("trims") => server.trim_alerts.push(TrimAlert {
                        time: time.clone(),
                        trimmed: alert["count"].as_u64().unwrap_or(0),
                        calls: alert["calls"].as_u64().unwrap_or(0),
                        gap: alert["gap"].clone(),
                    }),
                    _ => {}
                }
            }
        }
        let mut servers: Vec<ServerReport> = servers
            .into_values()
            .map(|mut server| {
                server.trimmed_percent = if server.decisions == 0 {
                    0.0
                } else {
                    (server.trimmed as f64 * 1000.0 / server.decisions as f64).round() / 10.0
                };
                let mut top: Vec<(String, u64)> = reasons
                    .remove(&server.server)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                top.truncate(TOP);
                server.reasons = top;
                for gaps in server.gaps.values_mut() {
                    gaps.sort_by_key(|g| std::cmp::Reverse(g.times));
                }
                let mut ids: Vec<RetryLoop> = loops
                    .remove(&server.server)
                    .unwrap_or_default()
                    .into_values()
                    .collect();
                ids.sort_by(|a, b| {
                    b.alerts
                        .cmp(&a.alerts)
                        .then(b.represented.cmp(&a.represented))
                        .then_with(|| a.identity.cmp(&b.identity))
                });
                let alerted = ids.iter().filter(|l| l.alerts > 0).count();
                ids.truncate(alerted.max(TOP));
                server.retry_loops = ids;
                server
            })
            .collect();
        servers.sort_by(|a, b| {
            b.trimmed_percent
                .total_cmp(&a.trimmed_percent)
                .then_with(|| a.server.cmp(&b.server))
        });
        let buckets = match first {
            Some(_) => (0..BUCKETS)
                .map(|i| format_rfc3339(start + width * i as i64))
                .collect(),
            None => Vec::new(),
        };
        Report {
            files: self.files,
            lines: self.lines,
            counted: self.read.len(),
            outside: self.outside,
            since: self.since.map(format_rfc3339),
            until: self.until.map(format_rfc3339),
            first: first.map(format_rfc3339),
            last: last.map(format_rfc3339),
            buckets,
            servers,
            malformed: self.malformed,
        }
    }
}
