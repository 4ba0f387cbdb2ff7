//! Reading audit lines and summing them up per server.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use mcpolicy_runtime::clock::{format_rfc3339, parse_rfc3339};
use mcpolicy_runtime::store::Millis;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

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
    /// The `_meta` notes (`context`, `maxTokens`, `model`), as the line
    /// wrote them: kept as text, a tree per trim would cost the report
    /// more memory than the line did.
    pub notes: Box<RawValue>,
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

/// Where a line falls in the order the report is made in: its time, then
/// the order it was read in (lines of equal time keep their files' order).
type Order = (Millis, u64);

/// A decision line's mark on its server's chart: the buckets are known only
/// once the first and last times are, so this much of each is kept.
struct Mark {
    time: Millis,
    server: u32,
    kind: MarkKind,
}

#[derive(Clone, Copy)]
enum MarkKind {
    Allow,
    Trim,
    Deny,
    Consent,
}

/// A requested-against-applied pair as it is being counted.
struct GapCount {
    gap: Gap,
    first: Order,
}

/// A retry loop as it is being counted.
struct LoopCount {
    retry: RetryLoop,
    first_alert: Option<Order>,
}

/// One server's counts while lines are read.
#[derive(Default)]
struct Tally {
    report: ServerReport,
    index: u32,
    reasons: HashMap<String, u64>,
    loops: HashMap<String, LoopCount>,
    /// Per kind, per (requested, applied) as compact JSON.
    gaps: BTreeMap<String, HashMap<String, GapCount>>,
    widest: Option<(u64, Order)>,
    trims: Vec<(Order, Trim)>,
    trim_alerts: Vec<(Order, TrimAlert)>,
}

/// Reads files line by line, summing each line up as it is read: memory is
/// what the report holds (its per-server counts, every trim's notes as
/// text, a 16-byte chart mark per decision), never the lines themselves
/// (`docs/performance.md`, "Audit report").
pub struct Builder {
    since: Option<Millis>,
    until: Option<Millis>,
    files: Vec<String>,
    lines: usize,
    counted: usize,
    outside: usize,
    seq: u64,
    span: Option<(Millis, Millis)>,
    servers: HashMap<String, Tally>,
    marks: Vec<Mark>,
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

fn bump_reason(map: &mut HashMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(count) => *count += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

/// Counts one more `requested` → `applied` of a kind, first seen at `order`.
fn add_gap(gaps: &mut HashMap<String, GapCount>, requested: &Value, applied: &Value, order: Order) {
    let key = serde_json::to_string(&(requested, applied)).unwrap_or_default();
    match gaps.get_mut(&key) {
        Some(count) => {
            count.gap.times += 1;
            count.first = count.first.min(order);
        }
        None => {
            gaps.insert(
                key,
                GapCount {
                    gap: Gap {
                        requested: requested.clone(),
                        applied: applied.clone(),
                        times: 1,
                    },
                    first: order,
                },
            );
        }
    }
}

/// The retry loop of `identity`, created on first sight.
fn retry_loop(loops: &mut HashMap<String, LoopCount>, identity: String) -> &mut LoopCount {
    loops.entry(identity.clone()).or_insert_with(|| LoopCount {
        retry: RetryLoop {
            identity,
            ..RetryLoop::default()
        },
        first_alert: None,
    })
}

/// Why reading a file stopped.
#[derive(Debug)]
pub enum ReadError {
    /// The files together hold more than the bytes one report reads.
    TooLarge,
    /// The file could not be read.
    Io(std::io::Error),
}

impl Builder {
    /// A builder keeping lines in `[since, until)`.
    pub fn new(since: Option<Millis>, until: Option<Millis>) -> Self {
        Builder {
            since,
            until,
            files: Vec::new(),
            lines: 0,
            counted: 0,
            outside: 0,
            seq: 0,
            span: None,
            servers: HashMap::new(),
            marks: Vec::new(),
            malformed: Vec::new(),
        }
    }

    /// Reads one file, line by line, taking at most `*left` bytes of it
    /// (and counting down what it took).
    pub fn read_from(
        &mut self,
        file: &str,
        input: impl BufRead,
        left: &mut u64,
    ) -> Result<(), ReadError> {
        self.files.push(file.to_owned());
        let mut input = input.take(left.saturating_add(1));
        let mut raw = Vec::new();
        let mut n = 0;
        loop {
            raw.clear();
            let read = input.read_until(b'\n', &mut raw).map_err(ReadError::Io)?;
            if read == 0 {
                return Ok(());
            }
            if read as u64 > *left {
                return Err(ReadError::TooLarge);
            }
            *left -= read as u64;
            n += 1;
            if raw.last() == Some(&b'\n') {
                raw.pop();
            }
            self.line(file, n, &raw);
        }
    }

    /// Line `n` of `file`.
    fn line(&mut self, file: &str, n: usize, raw: &[u8]) {
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.lines += 1;
        let parsed = serde_json::from_slice::<Value>(raw)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|value| check_line(&value).map(|(time, server)| (time, server, value)));
        match parsed {
            Ok((time, server, value)) => {
                if self.since.is_some_and(|s| time < s) || self.until.is_some_and(|u| time >= u) {
                    self.outside += 1;
                    return;
                }
                self.counted += 1;
                self.seq += 1;
                self.span = Some(match self.span {
                    Some((first, last)) => (first.min(time), last.max(time)),
                    None => (time, time),
                });
                self.count(time, server, &value);
            }
            Err(error) => self.malformed.push(Malformed {
                file: file.to_owned(),
                line: n,
                error,
            }),
        }
    }

    /// Adds one counted line to its server's tally.
    fn count(&mut self, time: Millis, server_id: String, v: &Value) {
        let order = (time, self.seq);
        let next = u32::try_from(self.servers.len()).unwrap_or(u32::MAX);
        let tally = self
            .servers
            .entry(server_id)
            .or_insert_with_key(|id| Tally {
                report: ServerReport {
                    server: id.clone(),
                    timeline: vec![Bucket::default(); BUCKETS],
                    ..ServerReport::default()
                },
                index: next,
                ..Tally::default()
            });
        let server = &mut tally.report;
        let event = v["event"].as_str().unwrap_or_default();
        let outcome = v["outcome"].as_str().unwrap_or_default();
        let time_text = || format_rfc3339(time);
        match event {
            "decision" => {
                server.decisions += 1;
                bump(&mut server.outcomes, outcome);
                let kind = match outcome {
                    "allow" => MarkKind::Allow,
                    "trim" => MarkKind::Trim,
                    "deny" => MarkKind::Deny,
                    _ => MarkKind::Consent,
                };
                self.marks.push(Mark {
                    time,
                    server: tally.index,
                    kind,
                });
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
            bump_reason(&mut tally.reasons, reason);
        }
        if let (Some(identity), Some(represented)) = (
            string(v, "identity"),
            v.get("represented").and_then(Value::as_u64),
        ) && represented > 0
        {
            let entry = retry_loop(&mut tally.loops, identity);
            entry.retry.represented = entry.retry.represented.max(represented);
        }
        if event == "decision"
            && let Some(notes) = v.get("trims").and_then(Value::as_object)
        {
            server.trimmed += 1;
            for reason in v["reasons"].as_array().into_iter().flatten() {
                if let Some(reason) = reason.as_str() {
                    bump_reason(&mut tally.reasons, reason);
                }
            }
            for (kind, note) in notes {
                let requested = &note["requested"];
                let applied = &note["applied"];
                add_gap(
                    tally.gaps.entry(kind.clone()).or_default(),
                    requested,
                    applied,
                    order,
                );
                if kind == "maxTokens" {
                    // The widest, and of equally wide ones the first.
                    let asked = requested.as_u64().unwrap_or(0);
                    let wider = tally
                        .widest
                        .is_none_or(|(most, at)| asked > most || (asked == most && order < at));
                    if wider {
                        tally.widest = Some((asked, order));
                        server.widest_max_tokens = Some(Gap {
                            requested: requested.clone(),
                            applied: applied.clone(),
                            times: 1,
                        });
                    }
                }
            }
            let notes = serde_json::value::to_raw_value(notes);
            if let Ok(notes) = notes {
                tally.trims.push((
                    order,
                    Trim {
                        time: time_text(),
                        id: v["id"].clone(),
                        notes,
                    },
                ));
            }
        }
        if event == "alert" {
            let alert = &v["alert"];
            match alert["kind"].as_str() {
                Some("retries") => {
                    let identity = string(v, "identity").unwrap_or_default();
                    let entry = retry_loop(&mut tally.loops, identity);
                    entry.retry.alerts += 1;
                    entry.retry.max_count = entry
                        .retry
                        .max_count
                        .max(alert["count"].as_u64().unwrap_or(0));
                    entry.retry.represented = entry
                        .retry
                        .represented
                        .max(alert["represented"].as_u64().unwrap_or(0));
                    if entry.first_alert.is_none_or(|first| order < first) {
                        entry.first_alert = Some(order);
                        entry.retry.first_alert = Some(time_text());
                    }
                }
                Some("trims") => tally.trim_alerts.push((
                    order,
                    TrimAlert {
                        time: time_text(),
                        trimmed: alert["count"].as_u64().unwrap_or(0),
                        calls: alert["calls"].as_u64().unwrap_or(0),
                        gap: alert["gap"].clone(),
                    },
                )),
                _ => {}
            }
        }
    }

    /// The report.
    pub fn finish(self) -> Report {
        let first = self.span.map(|(first, _)| first);
        let last = self.span.map(|(_, last)| last);
        let (start, width) = match self.span {
            Some((first, last)) => {
                let span = (last - first).max(1);
                (first, (span / BUCKETS as i64) + 1)
            }
            None => (0, 1),
        };
        let bucket_of = |time: Millis| (((time - start) / width) as usize).min(BUCKETS - 1);
        let mut tallies: Vec<Tally> = self.servers.into_values().collect();
        tallies.sort_by_key(|tally| tally.index);
        for mark in &self.marks {
            let Some(tally) = tallies.get_mut(mark.server as usize) else {
                continue;
            };
            let bucket = &mut tally.report.timeline[bucket_of(mark.time)];
            match mark.kind {
                MarkKind::Allow => bucket.allow += 1,
                MarkKind::Trim => bucket.trim += 1,
                MarkKind::Deny => bucket.deny += 1,
                MarkKind::Consent => bucket.consent += 1,
            }
        }
        let mut servers: Vec<ServerReport> = tallies
            .into_iter()
            .map(|tally| {
                let mut server = tally.report;
                server.trimmed_percent = if server.decisions == 0 {
                    0.0
                } else {
                    (server.trimmed as f64 * 1000.0 / server.decisions as f64).round() / 10.0
                };
                let mut top: Vec<(String, u64)> = tally.reasons.into_iter().collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                top.truncate(TOP);
                server.reasons = top;
                server.gaps = tally
                    .gaps
                    .into_iter()
                    .map(|(kind, gaps)| {
                        let mut gaps: Vec<GapCount> = gaps.into_values().collect();
                        // Most frequent first; of equally frequent ones, the first seen.
                        gaps.sort_by(|a, b| {
                            b.gap.times.cmp(&a.gap.times).then(a.first.cmp(&b.first))
                        });
                        (kind, gaps.into_iter().map(|count| count.gap).collect())
                    })
                    .collect();
                let mut trims = tally.trims;
                trims.sort_by_key(|(order, _)| *order);
                server.trims = trims.into_iter().map(|(_, trim)| trim).collect();
                let mut alerts = tally.trim_alerts;
                alerts.sort_by_key(|(order, _)| *order);
                server.trim_alerts = alerts.into_iter().map(|(_, alert)| alert).collect();
                let mut ids: Vec<RetryLoop> =
                    tally.loops.into_values().map(|count| count.retry).collect();
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
            counted: self.counted,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One random audit line at second `second` (distinct per line).
    fn line(second: u32, server: u8, kind: u8, n: u16) -> String {
        let time = format_rfc3339(1_773_144_000_000 + i64::from(second) * 1000);
        let server = format!("s{server}");
        let identity = format!("id{}", n % 4);
        let value = match kind % 6 {
            0 => serde_json::json!({"time": time, "event": "decision", "server": server,
                "id": n, "identity": identity, "outcome": "trim", "reasons": ["policy.max_tokens"],
                "represented": n % 3,
                "trims": {"maxTokens": {"requested": 1000 + u64::from(n % 3), "applied": 500},
                          "model": {"requested": [format!("m{}", n % 2)], "applied": []}}}),
            1 => serde_json::json!({"time": time, "event": "decision", "server": server,
                "identity": identity, "outcome": "deny", "reason": format!("r{}", n % 7),
                "replayed": n.is_multiple_of(2), "represented": n % 5}),
            2 => serde_json::json!({"time": time, "event": "alert", "server": server,
                "identity": identity, "alert": {"kind": "retries", "count": n % 9, "represented": n % 11}}),
            3 => serde_json::json!({"time": time, "event": "alert", "server": server,
                "alert": {"kind": "trims", "count": n % 9, "calls": n % 13, "gap": {"n": n}}}),
            4 => serde_json::json!({"time": time, "event": "consent", "server": server,
                "outcome": (["allow", "deny", "failed", "unanswered"][usize::from(n % 4)])}),
            _ => serde_json::json!({"time": time, "event": "decision", "server": server,
                "outcome": (["allow", "consent"][usize::from(n % 2)])}),
        };
        value.to_string()
    }

    fn report(lines: &[String]) -> String {
        let mut builder = Builder::new(None, None);
        let text = lines.join("\n");
        let mut left = u64::MAX;
        builder
            .read_from("a.jsonl", text.as_bytes(), &mut left)
            .expect("a slice reads");
        serde_json::to_string(&builder.finish()).expect("serialises")
    }

    proptest! {
        /// The report is made in time order whatever order the lines were
        /// read in: the streaming builder keeps, for every "first" and
        /// every list, the order the lines' times give (what sorting all
        /// lines first, as a whole-file reader would, gives).
        #[test]
        fn the_report_does_not_depend_on_the_order_lines_are_read_in(
            lines in proptest::collection::vec((0u8..4, 0u8..6, 0u16..1000), 1..60),
            seed in any::<u64>(),
        ) {
            let sorted: Vec<String> = lines
                .iter()
                .enumerate()
                .map(|(i, (server, kind, n))| line(i as u32, *server, *kind, *n))
                .collect();
            let mut shuffled = sorted.clone();
            // A Fisher-Yates shuffle driven by the seed.
            let mut state = seed | 1;
            for i in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(i, (state % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(report(&sorted), report(&shuffled));
        }
    }

    /// The byte cap holds across files and within a line.
    #[test]
    fn reading_stops_past_the_bytes_left() {
        let mut builder = Builder::new(None, None);
        let text = format!("{}\n{}\n", line(0, 0, 5, 1), line(1, 0, 5, 2));
        let mut left = text.len() as u64 - 1;
        assert!(matches!(
            builder.read_from("a", text.as_bytes(), &mut left),
            Err(ReadError::TooLarge)
        ));
        let mut left = text.len() as u64;
        let mut builder = Builder::new(None, None);
        assert!(builder.read_from("a", text.as_bytes(), &mut left).is_ok());
        assert_eq!(left, 0);
        assert_eq!(builder.finish().counted, 2);
    }
}
