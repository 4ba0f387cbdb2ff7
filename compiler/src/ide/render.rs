//! Effective values written back as policy statements, for hovers and hints.

use mcpolicy_runtime::table::{
    Budget, BudgetMetric, CalendarUnit, Consent, EffectiveBlock, Ttl, Window, builtin,
};

/// Milliseconds as the largest exact unit: `60000` → `1m`.
pub fn duration(ms: u64) -> String {
    for (unit, factor) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// Bytes as the largest exact unit: `65536` → `64 KiB`.
pub fn size(bytes: u64) -> String {
    for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes != 0 && bytes.is_multiple_of(factor) {
            return format!("{} {unit}", bytes / factor);
        }
    }
    format!("{bytes} B")
}

/// A reason's ttl as written.
pub fn ttl(ttl: Ttl) -> String {
    match ttl {
        Ttl::AfterMs(ms) => duration(ms),
        Ttl::UntilReset => "until_reset".to_owned(),
        Ttl::Forever => "forever".to_owned(),
        Ttl::None => "none".to_owned(),
    }
}

fn as_clause(reason: &str, default: &str) -> String {
    if reason == default {
        String::new()
    } else {
        format!(" as {reason}")
    }
}

fn switch(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// A budget window as written.
pub fn window(window: Window) -> String {
    match window {
        Window::Calendar(unit) => match unit {
            CalendarUnit::Hour => "hour",
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
        }
        .to_owned(),
        Window::RollingMs(ms) => duration(ms),
    }
}

/// A budget statement as written.
pub fn budget(budget: &Budget) -> String {
    let metric = match budget.metric {
        BudgetMetric::Requests => "requests",
        BudgetMetric::Tokens => "tokens",
    };
    format!(
        "budget {} {metric} per {}{}",
        budget.limit,
        window(budget.window),
        as_clause(&budget.reason, builtin::BUDGET_EXHAUSTED)
    )
}

/// Every statement of an effective block, as `(keyword, statement)`, in
/// the order the README lists them. Statements that impose nothing (an
/// unset limit) are left out.
pub fn effective_lines(block: &EffectiveBlock) -> Vec<(&'static str, String)> {
    let mut lines = vec![
        (
            "sampling",
            format!(
                "sampling {}{}",
                switch(block.sampling.enabled),
                as_clause(&block.sampling.reason, builtin::SAMPLING_DISABLED)
            ),
        ),
        (
            "tools",
            format!(
                "tools {}{}",
                switch(block.tools.enabled),
                as_clause(&block.tools.reason, builtin::TOOLS_DISABLED)
            ),
        ),
        (
            "max_context",
            format!("max_context {}", block.max_context.as_str()),
        ),
    ];
    if let Some(limit) = &block.max_input {
        lines.push((
            "max_input",
            format!(
                "max_input {}{}",
                size(limit.max),
                as_clause(&limit.reason, builtin::INPUT_TOO_LARGE)
            ),
        ));
    }
    if let Some(limit) = &block.max_messages {
        lines.push((
            "max_messages",
            format!(
                "max_messages {}{}",
                limit.max,
                as_clause(&limit.reason, builtin::INPUT_TOO_LARGE)
            ),
        ));
    }
    if let Some(max) = block.max_tokens {
        lines.push(("max_tokens", format!("max_tokens {max}")));
    }
    if let Some(rate) = &block.rate {
        lines.push((
            "rate",
            format!(
                "rate {} per {}{}",
                rate.count,
                duration(rate.window_ms),
                as_clause(&rate.reason, builtin::RATE_LIMIT)
            ),
        ));
    }
    for b in &block.budgets {
        lines.push(("budget", budget(b)));
    }
    if let Some(deadline) = &block.deadline {
        lines.push((
            "deadline",
            format!(
                "deadline {}{}",
                duration(deadline.ms),
                as_clause(&deadline.reason, builtin::DEADLINE)
            ),
        ));
    }
    let consent = match block.consent {
        Consent::Always => "always",
        Consent::First => "first",
        Consent::Never => "never",
    };
    lines.push(("consent", format!("consent {consent}")));
    if let Some(models) = &block.models {
        let list: Vec<String> = models.iter().map(|m| format!("{m:?}")).collect();
        lines.push(("models", format!("models {}", list.join(", "))));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(duration(60_000), "1m");
        assert_eq!(duration(90_000), "90s");
        assert_eq!(duration(250), "250ms");
        assert_eq!(duration(86_400_000), "1d");
        assert_eq!(size(65_536), "64 KiB");
        assert_eq!(size(1000), "1000 B");
    }
}
