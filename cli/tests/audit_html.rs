//! The `mcpc audit --format html` page in a real headless Chromium (the
//! Debian package): it loads with no console message at all (errors,
//! uncaught exceptions, warnings), its inline script draws every server's
//! chart (it sets `data-charts-rendered` on `<html>`, read from the dumped
//! DOM), and a screenshot shows the bars in their colours.
//!
//! Without Chromium the test says so and passes, unless
//! `MCPOLICY_REQUIRE_CHROMIUM` is set (CI sets it, after installing the
//! `chromium` package): then it fails. `MCPOLICY_CHROMIUM` names another
//! binary.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod audit_support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use audit_support::{mcpc, real_run};

fn chromium() -> Option<String> {
    let candidates: Vec<String> = match std::env::var("MCPOLICY_CHROMIUM") {
        Ok(path) => vec![path],
        Err(_) => vec!["chromium".into(), "chromium-browser".into()],
    };
    for candidate in candidates {
        let found = Command::new(&candidate)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return Some(candidate);
        }
    }
    assert!(
        std::env::var_os("MCPOLICY_REQUIRE_CHROMIUM").is_none(),
        "no Chromium (`chromium --version` failed), and MCPOLICY_REQUIRE_CHROMIUM is set"
    );
    eprintln!("skipping: no Chromium found (install the `chromium` package to run this test)");
    None
}

/// Runs headless Chromium on `page` with `mode` (`--dump-dom` or
/// `--screenshot=…`), killing it after a minute.
fn headless(chromium: &str, profile: &Path, page: &Path, mode: &str) -> Output {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--no-first-run",
            "--window-size=1000,1800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let start = Instant::now();
    // Read the pipes on threads so a full pipe cannot stall the browser.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).map(|_| buf)
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut buf).map(|_| buf)
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    }
}

/// Lines of Chromium's log that carry a console message of the page.
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect()
}

/// Decodes an 8-bit RGB or RGBA PNG into rows of RGB pixels.
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let (mut width, mut height, mut channels) = (0usize, 0usize, 0usize);
    let mut data = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!(body[8], 8, "8-bit");
                assert_eq!(body[12], 0, "not interlaced");
                channels = match body[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("colour type {other}"),
                };
            }
            b"IDAT" => data.extend_from_slice(body),
            _ => {}
        }
        at += 12 + len;
    }
    let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&data).expect("zlib data");
    let stride = width * channels;
    let mut previous = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(width * height);
    for row in 0..height {
        let line = &raw[row * (stride + 1)..(row + 1) * (stride + 1)];
        let filter = line[0];
        let mut current = line[1..].to_vec();
        for i in 0..stride {
            let a = if i >= channels {
                current[i - channels]
            } else {
                0
            };
            let b = previous[i];
            let c = if i >= channels {
                previous[i - channels]
            } else {
                0
            };
            let add = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = (
                        (p - i16::from(a)).abs(),
                        (p - i16::from(b)).abs(),
                        (p - i16::from(c)).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("filter {other}"),
            };
            current[i] = current[i].wrapping_add(add);
        }
        for px in current.chunks(channels) {
            pixels.push([px[0], px[1], px[2]]);
        }
        previous = current;
    }
    (width, height, pixels)
}

fn near(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 6)
}

#[test]
fn the_html_report_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let audit = real_run(dir.path());
    let out = mcpc()
        .args(["audit", "--format", "html"])
        .arg(&audit)
        .output()
        .unwrap();
    assert!(out.status.success());
    let page = dir.path().join("report.html");
    std::fs::write(&page, &out.stdout).unwrap();
    let profile = dir.path().join("profile");

    // The DOM after the scripts ran: three charts drawn, bars in each.
    let dump = headless(&chromium, &profile, &page, "--dump-dom");
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let console = console_lines(&dump.stderr);
    assert!(console.is_empty(), "console messages: {console:#?}");
    let dom = String::from_utf8(dump.stdout).unwrap();
    assert!(dom.contains("data-charts-rendered=\"3\""), "{dom}");
    let svgs = dom.matches("<svg").count();
    assert_eq!(svgs, 3, "{dom}");
    assert!(
        !dom.contains("data-bars=\"0\""),
        "a chart without bars: {dom}"
    );
    assert!(dom.contains("class=\"bar trim\""), "no trim bars");

    // The screenshot: not blank, and the chart colours are on it.
    let shot = dir.path().join("shot.png");
    let taken = headless(
        &chromium,
        &profile,
        &page,
        &format!("--screenshot={}", shot.display()),
    );
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let console = console_lines(&taken.stderr);
    assert!(console.is_empty(), "console messages: {console:#?}");
    let (width, height, pixels) = decode_png(&std::fs::read(&shot).unwrap());
    assert_eq!((width, height), (1000, 1800));
    let background = pixels[0];
    let drawn = pixels.iter().filter(|p| **p != background).count();
    assert!(
        drawn > pixels.len() / 50,
        "a blank page: {drawn} pixels drawn"
    );
    for (name, colour) in [
        ("trim", [0xe0, 0x8a, 0x1e]),
        ("deny", [0xc4, 0x3c, 0x3c]),
        ("consent", [0x4a, 0x6f, 0xd1]),
        ("allow", [0x3c, 0x8d, 0x5a]),
    ] {
        let count = pixels.iter().filter(|p| near(**p, colour)).count();
        // A legend swatch alone is about 120 pixels; with a bar, more.
        assert!(count > 200, "{name} bars: {count} pixels of {colour:?}");
        eprintln!("{name}: {count} pixels");
    }
    eprintln!(
        "screenshot {width}×{height}: {drawn} of {} pixels drawn",
        pixels.len()
    );
    if let Some(keep) = std::env::var_os("MCPOLICY_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

/// The console check can fail: a page whose script throws is caught.
#[test]
fn a_page_with_a_script_error_is_caught() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("broken.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><script>notDefined();</script></body></html>",
    )
    .unwrap();
    let dump = headless(&chromium, &dir.path().join("profile"), &page, "--dump-dom");
    let console = console_lines(&dump.stderr);
    assert!(
        console.iter().any(|l| l.contains("notDefined")),
        "{console:#?}"
    );
}
