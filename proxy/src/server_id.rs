//! The server id `mcpc proxy` uses when `--server-id` is not given.
//!
//! An id keys budgets, rates and stored refusals, so two different servers
//! must never receive the same one, and a hostile server must not be able to
//! pick the id of a trusted one. An id is therefore derived only from a name
//! that some registry or the `PATH` makes unique:
//!
//! | command | id |
//! |---|---|
//! | `npx -y @acme/notes@1.2` (also `bunx`, `npm exec`, `pnpm dlx`, `yarn dlx`, `deno run npm:…`) | `npm:@acme/notes` (npm package, scope kept, version dropped) |
//! | `deno run -A jsr:@acme/notes` | `jsr:@acme/notes` |
//! | `uvx mcp-server-fetch==1.0` (also `uv tool run`, `pipx run`) | `pypi:mcp-server-fetch` (PyPI tool) |
//! | `python3 -W ignore -m weather.server` (also `uv run … python -m`) | `python:weather.server` (module) |
//! | `java -cp lib/all.jar com.acme.Server` | `java:com.acme.Server` (main class) |
//! | `docker run -i --rm -v a:/b ghcr.io/acme/web-fetch:1` (also `podman`) | `image:ghcr.io/acme/web-fetch` (tag and digest dropped) |
//! | `mcp-server-github --stdio` (a program found on `PATH`) | `mcp-server-github` |
//!
//! The prefix names the registry, so a PyPI package cannot take the id of an
//! npm package or of a program of the same name; the npm scope is kept, so
//! `@evil/server-github` cannot take the id of `@acme/server-github`.
//!
//! Every launcher's options are read with its own table of which options
//! take a value, so an option's value is never taken for the server. What
//! cannot be read for certain is refused with [`Underivable`], which names
//! the command and asks for `--server-id`: a script or program given by path
//! (`node /opt/srv/index.js` and `node /opt/other/index.js` would both be
//! `index`), an option the table does not know (it might take a value), inline
//! code (`python -c`, `sh -c`), and commands that run a project rather than a
//! named package (`cargo run`, `go run`, `npm start`).

use std::ffi::OsString;

/// Why no server id could be derived from a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot derive a server id from `{command}`: {why}; pass --server-id NAME \
     (the name your client's configuration gives this server, and the one your \
     policy's `server \"…\"` blocks match)"
)]
pub struct Underivable {
    /// The command, as it would be typed.
    pub command: String,
    /// What could not be read.
    pub why: String,
}

/// The server id for `command` (the server command after `--`).
pub fn derive(command: &[OsString]) -> Result<String, Underivable> {
    let words: Vec<String> = command
        .iter()
        .map(|word| word.to_string_lossy().into_owned())
        .collect();
    let refuse = |why: String| Underivable {
        command: shell_words(&words),
        why,
    };
    let id = from_words(&words).map_err(refuse)?;
    if id.is_empty() || id.chars().any(char::is_control) {
        return Err(refuse(format!("`{id}` is not a usable server id")));
    }
    Ok(id)
}

fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_alphanumeric() || "@%+=:,./-_".contains(c))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

type Derivation = Result<String, String>;

/// How many wrappers (`env`, `uv run`, …) may nest before the command is refused.
const MAX_NESTING: usize = 8;

fn from_words(words: &[String]) -> Derivation {
    let mut words = words;
    for _ in 0..MAX_NESTING {
        match step(words)? {
            Step::Id(id) => return Ok(id),
            Step::Wrapped(rest) => words = rest,
        }
    }
    Err("too many nested launchers".to_owned())
}

/// One launcher read: either the id, or the command it wraps.
enum Step<'a> {
    Id(String),
    Wrapped(&'a [String]),
}

fn step(words: &[String]) -> Result<Step<'_>, String> {
    let Some(program) = words.first() else {
        return Err("the command is empty".to_owned());
    };
    let args = &words[1..];
    if program.contains(['/', '\\']) {
        return Err(format!(
            "`{program}` is given by path, and a path names no server"
        ));
    }
    let name = program_name(program);
    let id = match name.as_str() {
        "env" => return env(args).map(Step::Wrapped),
        "npx" | "bunx" => npm_runner(args, &NPX)?,
        "npm" => npm_subcommand(args, "npm", &["exec", "x"], &NPX)?,
        "pnpm" | "yarn" => npm_subcommand(args, &name, &["dlx"], &PNPM_DLX)?,
        "uvx" => python_tool(args, &UVX)?,
        "uv" => return uv(args),
        "pipx" => python_tool(
            subcommand(args, "pipx", &["run"], &PIPX_GLOBAL)?.1,
            &PIPX_RUN,
        )?,
        "docker" | "podman" => image(args, &name)?,
        "java" => java(args)?,
        "deno" => deno(args)?,
        _ if is_python(&name) => python(args)?,
        _ if SCRIPT_RUNNERS.contains(&name.as_str()) => {
            return Err(format!(
                "`{name}` runs a script or project, which names no server"
            ));
        }
        _ if is_script_file(&name) => {
            return Err(format!(
                "`{name}` is a script file, and a file name names no server"
            ));
        }
        _ => name,
    };
    Ok(Step::Id(id))
}

/// The program's name without a Windows launcher extension.
fn program_name(program: &str) -> String {
    let lower = program.to_ascii_lowercase();
    for ext in [".exe", ".cmd", ".bat", ".ps1"] {
        if lower.ends_with(ext) {
            return program[..program.len() - ext.len()].to_owned();
        }
    }
    program.to_owned()
}

/// `server.py`, `index.js`: a file in the working directory, not a program
/// on `PATH` (`uv run server.py` runs it with Python).
fn is_script_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        ".py", ".pyz", ".js", ".mjs", ".cjs", ".ts", ".mts", ".rb", ".sh", ".pl", ".php", ".jar",
        ".dll", ".lua", ".r",
    ]
    .iter()
    .any(|ext| lower.ends_with(ext))
}

fn is_python(name: &str) -> bool {
    name == "python"
        || name == "python3"
        || name == "py"
        || name == "pypy"
        || name == "pypy3"
        || name
            .strip_prefix("python3.")
            .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
}

/// Programs that run a script file, inline code or a project: the name after
/// them is a path or a project, never a registry name.
const SCRIPT_RUNNERS: &[&str] = &[
    "node",
    "nodejs",
    "bun",
    "tsx",
    "ts-node",
    "ruby",
    "perl",
    "php",
    "sh",
    "bash",
    "zsh",
    "dash",
    "fish",
    "pwsh",
    "powershell",
    "cmd",
    "cargo",
    "go",
    "dotnet",
    "poetry",
    "pipenv",
    "hatch",
    "pdm",
    "rye",
    "pixi",
    "conda",
    "mamba",
    "sudo",
    "doas",
    "nice",
    "nohup",
    "timeout",
    "exec",
    "stdbuf",
    "setsid",
    "xargs",
    "mvn",
    "gradle",
    "make",
    "just",
    "lua",
    "julia",
    "Rscript",
];

/// A launcher's options: which take a value (the next word, or attached as
/// `--opt=value` / `-ovalue`) and which do not. Short options may be
/// clustered (`-it`).
struct Options {
    long_flags: &'static [&'static str],
    long_valued: &'static [&'static str],
    short_flags: &'static str,
    short_valued: &'static str,
    /// A launcher's options that this subcommand also takes.
    extends: Option<&'static Options>,
}

/// What [`Options::read`] stopped at.
struct Read<'a> {
    /// The words from the first operand on.
    rest: &'a [String],
    /// Options seen that matter to the caller, with their values.
    seen: Vec<(String, String)>,
}

impl Options {
    fn long_flag(&self, option: &str) -> bool {
        self.long_flags.contains(&option) || self.extends.is_some_and(|o| o.long_flag(option))
    }

    fn long_valued(&self, option: &str) -> bool {
        self.long_valued.contains(&option) || self.extends.is_some_and(|o| o.long_valued(option))
    }

    fn short_flag(&self, letter: char) -> bool {
        self.short_flags.contains(letter) || self.extends.is_some_and(|o| o.short_flag(letter))
    }

    fn short_valued(&self, letter: char) -> bool {
        self.short_valued.contains(letter) || self.extends.is_some_and(|o| o.short_valued(letter))
    }

    /// Reads options up to the first operand (or after `--`). `watch` lists
    /// options whose values the caller needs.
    fn read<'a>(&self, words: &'a [String], watch: &[&str]) -> Result<Read<'a>, String> {
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some(word) = words.get(at) {
            if word == "--" {
                at += 1;
                break;
            }
            if let Some(long) = word.strip_prefix("--") {
                let (name, attached) = match long.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_owned())),
                    None => (long, None),
                };
                let option = format!("--{name}");
                if self.long_flag(&option) && attached.is_none() {
                    at += 1;
                } else if self.long_valued(&option) {
                    let value = match attached {
                        Some(value) => value,
                        None => value_after(words, at, &option)?,
                    };
                    at += if word.contains('=') { 1 } else { 2 };
                    if watch.contains(&option.as_str()) {
                        seen.push((option, value));
                    }
                } else {
                    return Err(unknown_option(&option));
                }
                continue;
            }
            let Some(cluster) = word.strip_prefix('-').filter(|c| !c.is_empty()) else {
                break;
            };
            at += 1;
            for (offset, letter) in cluster.char_indices() {
                let option = format!("-{letter}");
                if self.short_flag(letter) {
                    continue;
                }
                if !self.short_valued(letter) {
                    return Err(unknown_option(&option));
                }
                let attached = &cluster[offset + letter.len_utf8()..];
                let value = if attached.is_empty() {
                    let value = value_after(words, at - 1, &option)?;
                    at += 1;
                    value
                } else {
                    attached.trim_start_matches('=').to_owned()
                };
                if watch.contains(&option.as_str()) {
                    seen.push((option, value));
                }
                break;
            }
        }
        Ok(Read {
            rest: &words[at.min(words.len())..],
            seen,
        })
    }
}

fn value_after(words: &[String], at: usize, option: &str) -> Result<String, String> {
    words
        .get(at + 1)
        .cloned()
        .ok_or_else(|| format!("`{option}` has no value"))
}

fn unknown_option(option: &str) -> String {
    format!(
        "its option `{option}` is not one mcpc knows, so it cannot tell whether it takes a value"
    )
}

/// `env [-i] [-u NAME] [NAME=VALUE…] COMMAND…`
fn env(args: &[String]) -> Result<&[String], String> {
    const ENV: Options = Options {
        long_flags: &["--ignore-environment", "--null", "--debug"],
        long_valued: &["--unset", "--chdir"],
        short_flags: "i0v",
        short_valued: "uC",
        extends: None,
    };
    let read = ENV.read(args, &[])?;
    let first_command = read
        .rest
        .iter()
        .position(|word| !word.contains('='))
        .ok_or_else(|| "`env` runs no command".to_owned())?;
    Ok(&read.rest[first_command..])
}

const NPX: Options = Options {
    long_flags: &[
        "--yes",
        "--no",
        "--no-install",
        "--quiet",
        "--silent",
        "--ignore-existing",
        "--prefer-offline",
        "--prefer-online",
        "--offline",
        "--bun",
    ],
    long_valued: &[
        "--package",
        "--call",
        "--registry",
        "--cache",
        "--userconfig",
        "--prefix",
        "--workspace",
        "--node-options",
        "--loglevel",
    ],
    short_flags: "yq",
    short_valued: "pcw",
    extends: None,
};

const PNPM_DLX: Options = Options {
    long_flags: &["--silent", "--quiet", "--shell-mode", "--yes"],
    long_valued: &["--package", "--registry", "--dir", "--allow-build"],
    short_flags: "sy",
    short_valued: "pC",
    extends: None,
};

/// `npx [options] PACKAGE[@VERSION] [args]`: the package, scope kept.
fn npm_runner(args: &[String], options: &Options) -> Derivation {
    let read = options.read(args, &["--package", "-p", "--call", "-c"])?;
    if let Some((option, _)) = read.seen.first() {
        return Err(format!(
            "with `{option}` the command run is not the package's own"
        ));
    }
    let spec = read
        .rest
        .first()
        .ok_or_else(|| "no package is named".to_owned())?;
    npm_package(spec)
}

/// A launcher whose global options mcpc does not read: its subcommand must
/// come first.
const NO_GLOBALS: Options = Options {
    long_flags: &[],
    long_valued: &[],
    short_flags: "",
    short_valued: "",
    extends: None,
};

/// `npm exec …`, `pnpm dlx …`, `yarn dlx …`: read as `npx …`.
fn npm_subcommand(
    args: &[String],
    launcher: &str,
    subcommands: &[&str],
    options: &Options,
) -> Derivation {
    npm_runner(
        subcommand(args, launcher, subcommands, &NO_GLOBALS)?.1,
        options,
    )
}

/// The subcommand of `launcher [global options] SUBCOMMAND …`, when it is
/// one of `accepted`, and the words after it.
fn subcommand<'a>(
    args: &'a [String],
    launcher: &str,
    accepted: &[&str],
    globals: &Options,
) -> Result<(&'a str, &'a [String]), String> {
    let read = globals.read(args, &[])?;
    match read.rest.split_first() {
        Some((word, rest)) if accepted.contains(&word.as_str()) => Ok((word, rest)),
        Some((word, _)) => Err(format!(
            "`{launcher} {word}` does not name a package to run (only `{launcher} {}` does)",
            accepted.join("|")
        )),
        None => Err(format!("`{launcher}` runs nothing")),
    }
}

/// `@scope/name@1.2` → `@scope/name`; `name@latest` → `name`; `npm:` prefix
/// allowed. A path, URL, git or tarball spec names no registry package.
fn npm_package(spec: &str) -> Derivation {
    let spec = spec.strip_prefix("npm:").unwrap_or(spec);
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(scoped) => match scoped.split_once('/') {
            Some((scope, rest)) if !scope.is_empty() => (Some(scope), rest),
            _ => return Err(format!("`{spec}` is not an npm package name")),
        },
        None => (None, spec),
    };
    let name = rest.split('@').next().unwrap_or(rest);
    let valid = |part: &str| {
        !part.is_empty()
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    };
    if !valid(name) || !scope.is_none_or(valid) {
        return Err(format!(
            "`{spec}` is not an npm registry package (a path, URL or git spec names no server)"
        ));
    }
    Ok(match scope {
        Some(scope) => format!("npm:@{scope}/{name}"),
        None => format!("npm:{name}"),
    })
}

const UVX: Options = Options {
    long_flags: &[
        "--quiet",
        "--verbose",
        "--offline",
        "--no-cache",
        "--isolated",
        "--refresh",
        "--reinstall",
        "--upgrade",
        "--native-tls",
        "--no-progress",
        "--no-config",
        "--no-python-downloads",
        "--managed-python",
        "--no-managed-python",
        "--no-build",
        "--no-binary",
        "--no-sources",
        "--no-build-isolation",
        "--compile-bytecode",
        "--no-env-file",
        "--preview",
    ],
    long_valued: &[
        "--from",
        "--with",
        "--with-editable",
        "--with-requirements",
        "--python",
        "--index",
        "--index-url",
        "--extra-index-url",
        "--default-index",
        "--find-links",
        "--constraints",
        "--overrides",
        "--directory",
        "--project",
        "--cache-dir",
        "--config-file",
        "--env-file",
        "--python-preference",
        "--allow-insecure-host",
        "--keyring-provider",
        "--resolution",
        "--prerelease",
        "--exclude-newer",
        "--link-mode",
        "--color",
        "--refresh-package",
        "--reinstall-package",
        "--upgrade-package",
    ],
    short_flags: "qvnU",
    short_valued: "pcfP",
    extends: None,
};

const PIPX_GLOBAL: Options = Options {
    long_flags: &["--quiet", "--verbose"],
    long_valued: &[],
    short_flags: "qv",
    short_valued: "",
    extends: None,
};

const PIPX_RUN: Options = Options {
    long_flags: &[
        "--no-cache",
        "--pypackages",
        "--system-site-packages",
        "--quiet",
        "--verbose",
        "--path",
    ],
    long_valued: &[
        "--spec",
        "--python",
        "--index-url",
        "--editable",
        "--pip-args",
    ],
    short_flags: "qve",
    short_valued: "i",
    extends: None,
};

/// `uvx [options] TOOL[==VERSION|@VERSION] [args]`: the PyPI tool. With
/// `--from PACKAGE` (or pipx's `--spec`) the package names the server.
fn python_tool(args: &[String], options: &Options) -> Derivation {
    let read = options.read(args, &["--from", "--spec"])?;
    let spec = match read.seen.last() {
        Some((_, from)) => from.as_str(),
        None => read
            .rest
            .first()
            .ok_or_else(|| "no tool is named".to_owned())?,
    };
    python_package(spec)
}

/// `mcp-server-fetch==1.0` / `mcp-server-fetch@latest` / `pkg[extra]` → the
/// name; a path, URL or git spec names no registry package.
fn python_package(spec: &str) -> Derivation {
    let end = spec
        .find(|c: char| "=<>!~@[;( ".contains(c))
        .unwrap_or(spec.len());
    let name = &spec[..end];
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !valid {
        return Err(format!(
            "`{spec}` is not a PyPI package name (a path, URL or git spec names no server)"
        ));
    }
    Ok(format!("pypi:{name}"))
}

/// `uv [global options] tool run …` is `uvx …`; `uv [options] run [options]
/// COMMAND…` runs COMMAND in a project: the id comes from COMMAND.
fn uv(args: &[String]) -> Result<Step<'_>, String> {
    let read = UV_RUN.read(args, &[])?;
    match read.rest.split_first() {
        Some((word, rest)) if word == "tool" => match rest.split_first() {
            Some((run, rest)) if run == "run" => python_tool(rest, &UVX).map(Step::Id),
            _ => Err("only `uv tool run` names a package to run".to_owned()),
        },
        Some((word, rest)) if word == "run" => {
            let read = UV_RUN.read(rest, &["--module", "-m"])?;
            if let Some((_, module)) = read.seen.last() {
                return python_module(module).map(Step::Id);
            }
            if read.rest.is_empty() {
                return Err("`uv run` runs nothing".to_owned());
            }
            Ok(Step::Wrapped(read.rest))
        }
        Some((word, _)) => Err(format!("`uv {word}` does not run a server")),
        None => Err("`uv` runs nothing".to_owned()),
    }
}

/// `uv run`'s own options, beside uv's global and resolver options ([`UVX`]).
const UV_RUN: Options = Options {
    long_flags: &[
        "--frozen",
        "--locked",
        "--no-sync",
        "--all-extras",
        "--no-dev",
        "--dev",
        "--only-dev",
        "--no-project",
        "--active",
        "--exact",
        "--no-editable",
        "--all-packages",
        "--all-groups",
        "--no-default-groups",
        "--script",
        "--gui-script",
    ],
    long_valued: &[
        "--package",
        "--extra",
        "--group",
        "--only-group",
        "--no-group",
        "--config-setting",
        "--module",
    ],
    short_flags: "",
    short_valued: "Cm",
    extends: Some(&UVX),
};

/// `python [options] -m MODULE`: the module. A script path or `-c` code names
/// no server.
fn python(args: &[String]) -> Derivation {
    const PYTHON: Options = Options {
        long_flags: &["--version", "--help"],
        long_valued: &["--check-hash-based-pycs"],
        short_flags: "bBdEhiIOPqsSuvVxR",
        short_valued: "WXmc",
        extends: None,
    };
    let read = PYTHON.read(args, &["-m", "-c"])?;
    match read.seen.first() {
        Some((option, module)) if option == "-m" => python_module(module),
        Some(_) => Err("`python -c` runs inline code, which names no server".to_owned()),
        None => Err(match read.rest.first() {
            Some(script) => format!("`{script}` is a script path, and a path names no server"),
            None => "python runs no module".to_owned(),
        }),
    }
}

fn python_module(module: &str) -> Derivation {
    let valid = !module.is_empty()
        && module.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_alphanumeric() || c == '_')
        });
    if valid {
        Ok(format!("python:{module}"))
    } else {
        Err(format!("`{module}` is not a Python module name"))
    }
}

/// `docker [globals] run [options] IMAGE[:TAG][@DIGEST] [args]`: the image.
fn image(args: &[String], launcher: &str) -> Derivation {
    const GLOBALS: Options = Options {
        long_flags: &["--debug", "--tls", "--tlsverify"],
        long_valued: &[
            "--context",
            "--host",
            "--config",
            "--log-level",
            "--tlscacert",
            "--tlscert",
            "--tlskey",
            "--url",
            "--connection",
            "--remote",
            "--root",
            "--runroot",
            "--storage-driver",
            "--cgroup-manager",
            "--events-backend",
        ],
        short_flags: "D",
        short_valued: "cHl",
        extends: None,
    };
    let rest = match subcommand(args, launcher, &["run", "container"], &GLOBALS)? {
        ("container", rest) => match rest.split_first() {
            Some((run, rest)) if run == "run" => rest,
            _ => {
                return Err(format!(
                    "only `{launcher} container run` names an image to run"
                ));
            }
        },
        (_, rest) => rest,
    };
    let read = DOCKER_RUN.read(rest, &[])?;
    let reference = read
        .rest
        .first()
        .ok_or_else(|| "no image is named".to_owned())?;
    image_name(reference)
}

/// `ghcr.io/acme/web-fetch:1@sha256:…` → `ghcr.io/acme/web-fetch`.
fn image_name(reference: &str) -> Derivation {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    let name = match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    };
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._/:".contains(&b))
        && !name.starts_with(['/', '.', '-']);
    if valid {
        Ok(format!("image:{name}"))
    } else {
        Err(format!("`{reference}` is not an image reference"))
    }
}

const DOCKER_RUN: Options = Options {
    long_flags: &[
        "--interactive",
        "--tty",
        "--detach",
        "--rm",
        "--init",
        "--privileged",
        "--read-only",
        "--publish-all",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--quiet",
        "--sig-proxy",
        "--disable-content-trust",
        "--replace",
        "--rmi",
        "--tls-verify",
    ],
    long_valued: &[
        "--volume",
        "--env",
        "--env-file",
        "--network",
        "--net",
        "--name",
        "--publish",
        "--workdir",
        "--user",
        "--entrypoint",
        "--mount",
        "--label",
        "--label-file",
        "--platform",
        "--memory",
        "--memory-swap",
        "--memory-reservation",
        "--cpus",
        "--cpu-shares",
        "--cpuset-cpus",
        "--cpuset-mems",
        "--add-host",
        "--device",
        "--dns",
        "--dns-search",
        "--dns-option",
        "--hostname",
        "--domainname",
        "--ipc",
        "--pid",
        "--uts",
        "--userns",
        "--cgroupns",
        "--log-driver",
        "--log-opt",
        "--restart",
        "--runtime",
        "--security-opt",
        "--shm-size",
        "--stop-signal",
        "--stop-timeout",
        "--tmpfs",
        "--ulimit",
        "--volumes-from",
        "--cap-add",
        "--cap-drop",
        "--cidfile",
        "--cgroup-parent",
        "--gpus",
        "--pull",
        "--expose",
        "--attach",
        "--link",
        "--network-alias",
        "--ip",
        "--ip6",
        "--mac-address",
        "--group-add",
        "--storage-opt",
        "--sysctl",
        "--oom-score-adj",
        "--pids-limit",
        "--health-cmd",
        "--health-interval",
        "--health-retries",
        "--health-timeout",
        "--health-start-period",
        "--isolation",
        "--annotation",
        "--arch",
        "--os",
        "--variant",
        "--authfile",
        "--secret",
        "--pod",
        "--userns",
    ],
    short_flags: "itdPq",
    short_valued: "evpwulmhac",
    extends: None,
};

/// `java [options] MAIN.CLASS` or `java [options] -m MODULE[/CLASS]`: the main
/// class (or module). `-jar FILE` is a path and names no server. Java's
/// options are single-dash words (`-cp`), read here by their own table.
fn java(args: &[String]) -> Derivation {
    const VALUED: &[&str] = &[
        "-cp",
        "-classpath",
        "--class-path",
        "-p",
        "--module-path",
        "--upgrade-module-path",
        "--add-modules",
        "--add-opens",
        "--add-exports",
        "--add-reads",
        "--patch-module",
        "--limit-modules",
        "--enable-native-access",
    ];
    const FLAGS: &[&str] = &[
        "-server",
        "-client",
        "-ea",
        "-da",
        "-esa",
        "-dsa",
        "-enableassertions",
        "-disableassertions",
        "-showversion",
        "--show-version",
        "-verbose",
        "--enable-preview",
        "--disable-@files",
    ];
    // Options whose value is attached: `-Dk=v`, `-Xmx1g`, `-XX:+Opt`, `-javaagent:…`.
    const ATTACHED: &[&str] = &[
        "-D",
        "-X",
        "-verbose:",
        "-javaagent:",
        "-agentlib:",
        "-agentpath:",
        "-splash:",
        "-ea:",
        "-da:",
        "-enableassertions:",
        "-disableassertions:",
    ];
    let mut at = 0;
    while let Some(word) = args.get(at) {
        let option = word.split_once('=').map_or(word.as_str(), |(name, _)| name);
        if word == "-jar" {
            return Err("`java -jar` runs a jar file, and a path names no server".to_owned());
        }
        if word == "-m" || word == "--module" || option == "--module" {
            let module = if word.contains('=') {
                word.split_once('=').map(|(_, v)| v.to_owned())
            } else {
                args.get(at + 1).cloned()
            }
            .ok_or_else(|| format!("`{word}` has no value"))?;
            return java_name(module.rsplit('/').next().unwrap_or(&module));
        }
        if VALUED.contains(&option) {
            at += if word.contains('=') { 1 } else { 2 };
        } else if FLAGS.contains(&word.as_str()) || ATTACHED.iter().any(|p| word.starts_with(p)) {
            at += 1;
        } else if word.starts_with('-') {
            return Err(unknown_option(word));
        } else {
            return java_name(word);
        }
    }
    Err("java runs no main class".to_owned())
}

fn java_name(name: &str) -> Derivation {
    let valid = !name.is_empty()
        && name.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
                && part
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        });
    if valid {
        Ok(format!("java:{name}"))
    } else {
        Err(format!(
            "`{name}` is not a Java class or module name (a path names no server)"
        ))
    }
}

/// `deno run [options] npm:PACKAGE` or `jsr:@scope/name`: the package. A
/// script path or URL names no server.
fn deno(args: &[String]) -> Derivation {
    const DENO_RUN: Options = Options {
        long_flags: &[
            "--allow-all",
            "--allow-net",
            "--allow-read",
            "--allow-write",
            "--allow-env",
            "--allow-run",
            "--allow-sys",
            "--allow-ffi",
            "--allow-import",
            "--no-prompt",
            "--quiet",
            "--no-check",
            "--no-remote",
            "--no-npm",
            "--no-config",
            "--no-lock",
            "--reload",
            "--unstable",
            "--cached-only",
            "--node-modules-dir",
        ],
        long_valued: &[
            "--config",
            "--import-map",
            "--lock",
            "--cert",
            "--location",
            "--seed",
            "--v8-flags",
            "--env-file",
            "--deny-net",
            "--deny-read",
            "--deny-write",
            "--deny-env",
            "--deny-run",
        ],
        short_flags: "AqrP",
        short_valued: "c",
        extends: None,
    };
    let (_, rest) = subcommand(args, "deno", &["run"], &NO_GLOBALS)?;
    let read = DENO_RUN.read(rest, &[])?;
    let spec = read
        .rest
        .first()
        .ok_or_else(|| "`deno run` runs nothing".to_owned())?;
    if spec.starts_with("npm:") {
        return npm_package(spec);
    }
    if let Some(jsr) = spec.strip_prefix("jsr:") {
        return npm_package(jsr).map(|name| name.replacen("npm:", "jsr:", 1));
    }
    Err(format!(
        "`{spec}` is a script path or URL, which names no server"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use proptest::prelude::*;

    fn id(command: &str) -> Result<String, String> {
        let words: Vec<OsString> = command.split(' ').map(OsString::from).collect();
        derive(&words).map_err(|refused| refused.why)
    }

    #[test]
    fn registry_names_are_ids() {
        for (command, expected) in [
            (
                "npx -y @modelcontextprotocol/server-github",
                "npm:@modelcontextprotocol/server-github",
            ),
            ("npx -y @acme/notes@1.2.3 --stdio", "npm:@acme/notes"),
            ("npx --yes mcp-remote@latest https://x", "npm:mcp-remote"),
            ("npm exec -y -- @acme/notes", "npm:@acme/notes"),
            ("pnpm dlx @acme/notes", "npm:@acme/notes"),
            ("bunx @acme/notes", "npm:@acme/notes"),
            ("npx.cmd -y @acme/notes", "npm:@acme/notes"),
            ("uvx mcp-server-fetch", "pypi:mcp-server-fetch"),
            (
                "uvx --python 3.12 mcp-server-fetch==1.0",
                "pypi:mcp-server-fetch",
            ),
            (
                "uvx --from mcp-server-git@2 mcp-server-git",
                "pypi:mcp-server-git",
            ),
            ("uv tool run mcp-server-time", "pypi:mcp-server-time"),
            ("pipx run mcp-server-fetch", "pypi:mcp-server-fetch"),
            ("python3 -m weather.server", "python:weather.server"),
            ("python3 -W ignore -m notes", "python:notes"),
            ("python3.12 -u -m notes.main", "python:notes.main"),
            ("uv run -m weather.server", "python:weather.server"),
            ("uv run --with mcp python -m weather", "python:weather"),
            ("uv run mcp-server-weather", "mcp-server-weather"),
            ("env FOO=1 uvx mcp-server-fetch", "pypi:mcp-server-fetch"),
            (
                "docker run -i --rm ghcr.io/acme/web-fetch:1",
                "image:ghcr.io/acme/web-fetch",
            ),
            (
                "docker run -i --rm -v /home/me/data:/data ghcr.io/acme/web-fetch:1",
                "image:ghcr.io/acme/web-fetch",
            ),
            (
                "docker run -i --rm --network host mcp/fetch@sha256:abc",
                "image:mcp/fetch",
            ),
            (
                "docker run -it -eFOO=1 --env=BAR=2 mcp/time",
                "image:mcp/time",
            ),
            (
                "podman --log-level debug container run -i localhost:5000/srv",
                "image:localhost:5000/srv",
            ),
            (
                "java -cp lib/all.jar com.acme.Server",
                "java:com.acme.Server",
            ),
            (
                "java -Xmx1g -Dmode=stdio --module-path mods -m acme.srv/com.acme.Main",
                "java:com.acme.Main",
            ),
            ("deno run -A npm:@acme/notes@1", "npm:@acme/notes"),
            ("deno run --allow-net jsr:@acme/notes", "jsr:@acme/notes"),
            ("mcp-server-github --stdio", "mcp-server-github"),
        ] {
            assert_eq!(id(command).as_deref(), Ok(expected), "{command}");
        }
    }

    #[test]
    fn what_cannot_be_read_for_certain_is_refused() {
        for command in [
            "node /opt/srv/index.js",
            "node --max-old-space-size 4096 build/index.js",
            "node",
            "python3 /opt/notes.py",
            "python3 -W ignore /opt/notes.py",
            "python -c import_srv",
            "uv --directory /Users/me/projects/mcp run server.py",
            "uv run --with mcp server.py",
            "java -jar lib/server.jar",
            "./bin/notes --stdio",
            "/usr/local/bin/notes",
            "npx -y ./local-package",
            "npx -y github:acme/notes",
            "npx -p @acme/notes notes-cli",
            "npx --some-new-flag value @acme/notes",
            "docker exec -i srv notes",
            "docker run -i --some-new-flag x img",
            "docker run -i",
            "deno run -A ./server.ts",
            "deno run -A https://example.com/server.ts",
            "sh -c notes",
            "bash start.sh",
            "cargo run --release",
            "uv run server.py",
            "index.js",
            "env FOO=1",
            "uvx git+https://github.com/acme/notes",
            "",
        ] {
            let refused = id(command);
            assert!(refused.is_err(), "{command} gave {refused:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_command_and_the_remedy() {
        let command: Vec<OsString> = ["node", "/opt/srv/index.js"].map(OsString::from).to_vec();
        let message = derive(&command).unwrap_err().to_string();
        assert!(message.contains("`node /opt/srv/index.js`"), "{message}");
        assert!(message.contains("--server-id"), "{message}");
    }

    /// What an option may carry: paths, numbers, `k=v`, names.
    fn option_value() -> impl Strategy<Value = String> {
        prop_oneof![
            "/[a-z]{1,6}(/[a-z]{1,6}){0,3}(:/[a-z]{1,4})?",
            "[0-9]{1,5}",
            "[A-Z]{1,5}=[a-z0-9]{0,5}",
            "[a-z][a-z0-9-]{0,10}",
        ]
    }

    fn npm_name() -> impl Strategy<Value = String> {
        ("(@[a-z][a-z0-9-]{0,8}/)?", "[a-z][a-z0-9-]{0,12}").prop_map(|(s, n)| format!("{s}{n}"))
    }

    /// A launcher form: its words with `{}` where the server's name goes,
    /// options drawn with random values, and the id it must give.
    fn command() -> impl Strategy<Value = (Vec<String>, String)> {
        let docker_options = prop::collection::vec(
            (
                prop::sample::select(vec!["-v", "--volume", "-e", "--network", "--name", "-w"]),
                option_value(),
            ),
            0..4,
        );
        let uvx_options = prop::collection::vec(
            (
                prop::sample::select(vec!["--python", "--with", "--index-url", "-p"]),
                option_value(),
            ),
            0..3,
        );
        let python_options = prop::collection::vec(
            (prop::sample::select(vec!["-W", "-X"]), option_value()),
            0..3,
        );
        prop_oneof![
            (
                docker_options,
                "[a-z][a-z0-9-]{0,8}(/[a-z][a-z0-9-]{0,8}){0,2}",
                "(:[0-9a-z.]{1,5})?"
            )
                .prop_map(|(options, image, tag)| {
                    let mut words = vec!["docker".to_owned(), "run".to_owned(), "-i".to_owned()];
                    for (option, value) in options {
                        words.push(option.to_owned());
                        words.push(value);
                    }
                    words.push(format!("{image}{tag}"));
                    (words, format!("image:{image}"))
                }),
            (uvx_options, "[a-z][a-z0-9-]{0,12}").prop_map(|(options, tool)| {
                let mut words = vec!["uvx".to_owned()];
                for (option, value) in options {
                    words.push(option.to_owned());
                    words.push(value);
                }
                words.push(tool.clone());
                (words, format!("pypi:{tool}"))
            }),
            (
                python_options,
                "[a-z_][a-z0-9_]{0,8}(\\.[a-z_][a-z0-9_]{0,8}){0,2}"
            )
                .prop_map(|(options, module)| {
                    let mut words = vec!["python3".to_owned()];
                    for (option, value) in options {
                        words.push(option.to_owned());
                        words.push(value);
                    }
                    words.push("-m".to_owned());
                    words.push(module.clone());
                    (words, format!("python:{module}"))
                }),
            (npm_name(), "(@[0-9]{1,2}(\\.[0-9]{1,2}){0,2})?").prop_map(|(package, version)| {
                (
                    vec![
                        "npx".to_owned(),
                        "-y".to_owned(),
                        format!("{package}{version}"),
                    ],
                    format!("npm:{package}"),
                )
            }),
        ]
    }

    proptest! {
        /// An option's value is never taken for the server: every derived id
        /// is the name the command runs.
        #[test]
        fn option_values_never_become_the_id((words, expected) in command()) {
            let command: Vec<OsString> = words.iter().map(OsString::from).collect();
            prop_assert_eq!(derive(&command).map_err(|e| e.why), Ok(expected));
        }

        /// Two commands that run different servers never share an id: ids
        /// from different launchers differ by their registry prefix, ids from
        /// one launcher by the name, and a script given by path is refused
        /// whatever runs it.
        #[test]
        fn different_servers_never_share_an_id(
            (a, name_a) in command(),
            (b, name_b) in command(),
            dir in "/[a-z]{1,6}(/[a-z]{1,6}){0,2}",
            runner in prop::sample::select(vec!["node", "python3", "bun", "ruby", "bash", "deno"]),
        ) {
            let id_a = derive(&a.iter().map(OsString::from).collect::<Vec<_>>());
            let id_b = derive(&b.iter().map(OsString::from).collect::<Vec<_>>());
            prop_assert_eq!(id_a == id_b, name_a == name_b);
            let script = [runner.to_owned(), format!("{dir}/index.js")];
            prop_assert!(derive(&script.map(OsString::from)).is_err());
        }
    }
}
