//! The report as one self-contained HTML page: no network, inline CSS, the
//! report's JSON inline, and a small inline script that draws each server's
//! chart over time as SVG (stacked outcomes per time bucket, with the
//! trimmed share as a line). When every chart is drawn the script sets
//! `data-charts-rendered` on `<html>` to their number, which a headless
//! browser test reads from the dumped DOM (`cli/tests/audit_html.rs`).

use std::fmt::Write;

use super::human::{gaps, notes};
use super::report::{Report, WIDE_PERCENT};

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the report's JSON into `out` as it is serialised, safe inside
/// `<script>`: no `</script>` or `<!--` can close it, and no U+2028/U+2029
/// can end a line in an older parser. Written straight into the page, so a
/// large report is held once, not copied once per replacement.
fn script_json(report: &Report, out: String) -> String {
    let mut safe = ScriptSafe {
        start: out.len(),
        out: out.into_bytes(),
    };
    let mark = safe.out.len();
    if serde_json::to_writer(&mut safe, report).is_err() {
        safe.out.truncate(mark);
        safe.out.extend_from_slice(b"{}");
    }
    // Only ASCII escapes replaced whole UTF-8 sequences: still UTF-8.
    String::from_utf8(safe.out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The escaping writer of [`script_json`].
struct ScriptSafe {
    out: Vec<u8>,
    /// Where the JSON starts: a U+2028 is looked for only after it.
    start: usize,
}

impl std::io::Write for ScriptSafe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &byte in buf {
            match byte {
                b'<' => self.out.extend_from_slice(b"\\u003c"),
                b'>' => self.out.extend_from_slice(b"\\u003e"),
                b'&' => self.out.extend_from_slice(b"\\u0026"),
                // U+2028 and U+2029 are E2 80 A8 and E2 80 A9, however
                // the serialiser split its writes.
                0xA8 | 0xA9
                    if self.out.len() >= self.start + 2 && self.out.ends_with(&[0xE2, 0x80]) =>
                {
                    self.out.truncate(self.out.len() - 2);
                    self.out
                        .extend_from_slice(if byte == 0xA8 { b"\\u2028" } else { b"\\u2029" });
                }
                _ => self.out.push(byte),
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1d2330; background: #fbfbfd; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; } th, td { padding: .25em .7em; text-align: right; border-bottom: 1px solid #dde; }
th:first-child, td:first-child { text-align: left; }
tr.wide td { background: #fff1e6; font-weight: 600; }
.flag { color: #b3470b; font-weight: 700; }
.chart svg { display: block; background: #fff; border: 1px solid #dde; }
.legend span { display: inline-block; margin-right: 1em; }
.legend i { display: inline-block; width: .8em; height: .8em; margin-right: .3em; }
.muted { color: #667; } ul { margin: .3em 0; } code { font-size: .95em; }
"#;

const SCRIPT: &str = r##"
(function () {
  "use strict";
  var report = JSON.parse(document.getElementById("audit-data").textContent);
  var colors = { allow: "#3c8d5a", trim: "#e08a1e", deny: "#c43c3c", consent: "#4a6fd1" };
  var kinds = ["allow", "trim", "deny", "consent"];
  var NS = "http://www.w3.org/2000/svg";
  function el(name, attrs) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }
  var drawn = 0;
  report.servers.forEach(function (server, index) {
    var holder = document.getElementById("chart-" + index);
    if (!holder) { return; }
    var W = 720, H = 180, left = 40, bottom = 24, top = 10;
    var buckets = server.timeline;
    var max = 1;
    buckets.forEach(function (b) {
      var total = kinds.reduce(function (s, k) { return s + b[k]; }, 0);
      if (total > max) { max = total; }
    });
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
    var title = el("title", {});
    title.textContent = "Decisions over time for " + server.server;
    svg.appendChild(title);
    var bw = (W - left - 10) / buckets.length;
    var plot = H - bottom - top;
    var bars = 0;
    buckets.forEach(function (b, i) {
      var y = H - bottom;
      kinds.forEach(function (k) {
        if (!b[k]) { return; }
        var h = plot * b[k] / max;
        y -= h;
        var rect = el("rect", { x: left + i * bw + 1, y: y, width: Math.max(bw - 2, 1), height: h, fill: colors[k], "class": "bar " + k });
        var tip = el("title", {});
        tip.textContent = report.buckets[i] + ": " + b[k] + " " + k;
        rect.appendChild(tip);
        svg.appendChild(rect);
        bars += 1;
      });
    });
    // The trimmed share per bucket, on a 0-100 % scale.
    var points = [];
    buckets.forEach(function (b, i) {
      var total = kinds.reduce(function (s, k) { return s + b[k]; }, 0);
      if (total > 0) {
        points.push((left + i * bw + bw / 2).toFixed(1) + "," + (H - bottom - plot * b.trim / total).toFixed(1));
      }
    });
    if (points.length > 1) {
      svg.appendChild(el("polyline", { points: points.join(" "), fill: "none", stroke: "#7a3d00", "stroke-width": 1.5, "stroke-dasharray": "4 3", "class": "trimmed" }));
    }
    svg.appendChild(el("line", { x1: left, y1: H - bottom, x2: W - 10, y2: H - bottom, stroke: "#889" }));
    var ymax = el("text", { x: left - 6, y: top + 10, "text-anchor": "end", "font-size": 11 });
    ymax.textContent = String(max);
    svg.appendChild(ymax);
    [0, buckets.length - 1].forEach(function (i) {
      var t = el("text", { x: left + i * bw + (i ? bw : 0), y: H - 6, "text-anchor": i ? "end" : "start", "font-size": 11 });
      t.textContent = (report.buckets[i] || "").replace("T", " ").replace(/\.\d+Z$/, "Z");
      svg.appendChild(t);
    });
    svg.setAttribute("data-bars", String(bars));
    holder.appendChild(svg);
    drawn += 1;
  });
  document.documentElement.setAttribute("data-charts-rendered", String(drawn));
})();
"##;

/// Renders the page.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>mcpolicy audit</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>mcpolicy audit</h1>\n"
    );
    let span = match (&report.first, &report.last) {
        (Some(first), Some(last)) => format!("{first} … {last}"),
        _ => "no decisions".to_owned(),
    };
    let _ = writeln!(
        out,
        "<p class=\"muted\">{} lines from {} file(s), {}: {} counted, {} outside the range, {} malformed.</p>",
        report.lines,
        report.files.len(),
        escape(&span),
        report.counted,
        report.outside,
        report.malformed.len()
    );
    if !report.malformed.is_empty() {
        out.push_str("<ul class=\"malformed\">\n");
        for bad in &report.malformed {
            let _ = writeln!(
                out,
                "<li>{}:{}: {}</li>",
                escape(&bad.file),
                bad.line,
                escape(&bad.error)
            );
        }
        out.push_str("</ul>\n");
    }
    out.push_str(
        "<table>\n<tr><th>server</th><th>decisions</th><th>allow</th><th>trim</th><th>deny</th>\
         <th>consent</th><th>trimmed</th><th>widest maxTokens</th><th>retry loops</th></tr>\n",
    );
    for s in &report.servers {
        let count = |k: &str| s.outcomes.get(k).copied().unwrap_or(0);
        let wide = s.decisions > 0 && s.trimmed_percent >= WIDE_PERCENT;
        let widest = s.widest_max_tokens.as_ref().map_or_else(
            || "-".to_owned(),
            |w| format!("{} → {}", w.requested, w.applied),
        );
        let _ = writeln!(
            out,
            "<tr{}><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{}</td><td>{}</td></tr>",
            if wide { " class=\"wide\"" } else { "" },
            if wide {
                "<span class=\"flag\">! </span>"
            } else {
                ""
            },
            escape(&s.server),
            s.decisions,
            count("allow"),
            count("trim"),
            count("deny"),
            count("consent"),
            s.trimmed_percent,
            escape(&widest),
            s.retry_loops.iter().filter(|l| l.alerts > 0).count()
        );
    }
    out.push_str("</table>\n");
    out.push_str(
        "<p class=\"legend\"><span><i style=\"background:#3c8d5a\"></i>allow</span>\
         <span><i style=\"background:#e08a1e\"></i>trim</span><span><i style=\"background:#c43c3c\"></i>deny</span>\
         <span><i style=\"background:#4a6fd1\"></i>consent</span><span>- - trimmed share</span></p>\n",
    );
    for (i, s) in report.servers.iter().enumerate() {
        let _ = writeln!(out, "<section>\n<h2>{}</h2>", escape(&s.server));
        let _ = writeln!(out, "<div class=\"chart\" id=\"chart-{i}\"></div>");
        out.push_str("<ul>\n");
        if !s.reasons.is_empty() {
            let reasons: Vec<String> = s
                .reasons
                .iter()
                .map(|(r, n)| format!("<code>{}</code> ×{n}", escape(r)))
                .collect();
            let _ = writeln!(out, "<li>reasons: {}</li>", reasons.join(", "));
        }
        if !s.gaps.is_empty() {
            let parts: Vec<String> = s.gaps.iter().map(|(k, g)| escape(&gaps(k, g))).collect();
            let _ = writeln!(
                out,
                "<li>trims ({}), requested → applied: {}</li>",
                s.trimmed,
                parts.join("; ")
            );
        }
        for l in s.retry_loops.iter().filter(|l| l.alerts > 0) {
            let _ = writeln!(
                out,
                "<li>retry loop <code>{}</code>: {} alert(s), up to {} re-presentations in a window, represented {}</li>",
                escape(&l.identity),
                l.alerts,
                l.max_count,
                l.represented
            );
        }
        for a in &s.trim_alerts {
            let _ = writeln!(
                out,
                "<li>trim alert at {}: {} of {} calls trimmed; gap <code>{}</code></li>",
                escape(&a.time),
                a.trimmed,
                a.calls,
                escape(&notes(&a.gap))
            );
        }
        let c = &s.consent;
        let _ = writeln!(
            out,
            "<li>consent: {} prompts, {} approved, {} refused, {} failed by the client, {} unanswered when the session ended</li>",
            c.prompts, c.approved, c.refused, c.failed, c.unanswered
        );
        out.push_str("</ul>\n</section>\n");
    }
    out.push_str("<script type=\"application/json\" id=\"audit-data\">");
    let mut out = script_json(report, out);
    let _ = write!(
        out,
        "</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    );
    out
}
