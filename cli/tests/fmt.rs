//! `mcpc fmt FILE` on the file system, through the real binary. The
//! formatter itself is tested in `compiler/tests/format.rs`.

use std::fs;
use std::path::Path;

use mcpolicy_compiler::format::format;

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---- `mcpc fmt FILE` on the file system, through the real binary ----
//
// Guarantees: fmt writes only the file it was given (the real file behind a
// symlink), through a fresh temporary name no one can plant; it keeps the
// file's permissions; it never makes hard links diverge (it refuses).

const MESSY: &str = "mcpolicy 1\ndefaults {   sampling on\n}\n";
const TIDY: &str = "mcpolicy 1\n\ndefaults {\n  sampling on\n}\n";

fn mcpc_fmt(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("fmt")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("mcpc runs")
}

#[test]
fn fmt_fixture_is_reformatted() {
    assert_eq!(format(MESSY).expect("valid"), TIDY);
}

#[cfg(unix)]
#[test]
fn fmt_leaves_a_symlink_planted_at_the_old_temporary_name_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.mcpolicy");
    let victim = dir.path().join("victim.txt");
    fs::write(&policy, MESSY).expect("write policy");
    fs::write(&victim, "precious\n").expect("write victim");
    // The name older versions of mcpc wrote to, planted as a link.
    let planted = dir.path().join(".policy.mcpolicy.mcpc-fmt.tmp");
    std::os::unix::fs::symlink(&victim, &planted).expect("plant symlink");

    let out = mcpc_fmt(&[policy.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(read(&victim), "precious\n", "the link's target was written");
    let planted_meta = fs::symlink_metadata(&planted).expect("planted link still there");
    assert!(planted_meta.file_type().is_symlink());
    assert_eq!(fs::read_link(&planted).expect("readlink"), victim);
    assert_eq!(read(&policy), TIDY);
    // Nothing else is left behind.
    let names: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[cfg(unix)]
#[test]
fn fmt_writes_through_a_symlinked_policy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let real_dir = dir.path().join("real");
    let link_dir = dir.path().join("links");
    fs::create_dir(&real_dir).expect("mkdir");
    fs::create_dir(&link_dir).expect("mkdir");
    let target = real_dir.join("policy.mcpolicy");
    fs::write(&target, MESSY).expect("write policy");
    let link = link_dir.join("policy.mcpolicy");
    // A relative link, as dotfile managers write them.
    std::os::unix::fs::symlink("../real/policy.mcpolicy", &link).expect("symlink");

    let out = mcpc_fmt(&[link.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let meta = fs::symlink_metadata(&link).expect("link");
    assert!(meta.file_type().is_symlink(), "the symlink was replaced");
    assert_eq!(read(&target), TIDY, "the target was not formatted");
    assert_eq!(read(&link), TIDY);
    assert_eq!(
        fs::read_dir(&link_dir).expect("list").count(),
        1,
        "something was left beside the link"
    );
    assert_eq!(fs::read_dir(&real_dir).expect("list").count(), 1);
}

#[cfg(unix)]
#[test]
fn fmt_keeps_the_file_permissions() {
    use std::os::unix::fs::PermissionsExt;
    for mode in [0o600, 0o640, 0o644, 0o755] {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy = dir.path().join("policy.mcpolicy");
        fs::write(&policy, MESSY).expect("write policy");
        fs::set_permissions(&policy, fs::Permissions::from_mode(mode)).expect("chmod");
        let out = mcpc_fmt(&[policy.as_os_str()]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(read(&policy), TIDY);
        let got = fs::metadata(&policy).expect("meta").permissions().mode() & 0o7777;
        assert_eq!(got, mode, "mode {mode:o} became {got:o}");
    }
}

/// A policy with several hard links is refused: replacing one name would
/// leave the others with the old text, and writing in place is not atomic
/// (a crash half way would leave a truncated, possibly weaker, policy).
#[cfg(unix)]
#[test]
fn fmt_refuses_a_hard_linked_policy_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.mcpolicy");
    let other = dir.path().join("other-name.mcpolicy");
    fs::write(&policy, MESSY).expect("write policy");
    fs::hard_link(&policy, &other).expect("hard link");

    let out = mcpc_fmt(&[policy.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hard links"), "{stderr}");
    assert_eq!(read(&policy), MESSY);
    assert_eq!(read(&other), MESSY);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(&policy).expect("meta").nlink(),
        2,
        "links diverged"
    );
    assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 2);

    // `--check` only reads, so it works on hard-linked files.
    let out = mcpc_fmt(&[std::ffi::OsStr::new("--check"), policy.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
