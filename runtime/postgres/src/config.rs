//! Where a store is: a `postgres://` URL or a libpq `key=value` string,
//! never with a password in it. The password comes from `PGPASSWORD` or a
//! password file (`passfile=…`, `PGPASSFILE`, `~/.pgpass`), as libpq reads
//! them, so it never appears on a command line or in a process listing.

use std::path::PathBuf;
use std::str::FromStr;

use crate::tls::{self, TlsParams, TlsSpec};

/// Why a store's connection string was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The string carries a password.
    #[error(
        "the connection string contains a password; give it in PGPASSWORD or a password file \
         (PGPASSFILE, ~/.pgpass, or passfile=PATH), never on the command line"
    )]
    PasswordInString,
    /// The PostgreSQL client could not read the string.
    #[error("invalid PostgreSQL connection string: {0}")]
    Invalid(String),
    /// `schema=` is not a valid schema name.
    #[error(
        "`{0}` is not a valid schema name (lowercase letters, digits and `_`, not starting \
         with a digit, at most 63 bytes)"
    )]
    BadSchema(String),
    /// A TLS parameter (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) that
    /// cannot be used; the message names it.
    #[error("{0}")]
    Tls(String),
    /// A TLS parameter of libpq's that this store does not support.
    #[error(
        "`{0}` is not supported by the mcpolicy PostgreSQL store (it reads sslmode, \
         sslrootcert, sslcert, sslkey and sslnegotiation); remove it"
    )]
    UnsupportedTls(String),
}

/// A parsed store location: the client configuration (password filled in
/// from the environment or a password file), the schema it names, if any,
/// and how it uses TLS.
#[derive(Debug, Clone)]
pub struct StoreSpec {
    /// The client's configuration.
    pub config: tokio_postgres::Config,
    /// `schema=NAME` (key=value form) or `?schema=NAME` (URL form).
    pub schema: Option<String>,
    /// `sslmode`, `sslrootcert`, `sslcert`, `sslkey` (or `PGSSLMODE`, …),
    /// with libpq's meaning (`src/tls.rs`).
    pub tls: TlsSpec,
}

/// What [`split_url`] and [`split_pairs`] take out of a string: the rest,
/// for the client, and the parameters this crate reads itself.
#[derive(Debug, Default)]
struct Split {
    rest: String,
    schema: Option<String>,
    passfile: Option<PathBuf>,
    tls: TlsParams,
}

impl StoreSpec {
    /// Whether `spec` names a PostgreSQL store rather than a file: a
    /// `postgres://` or `postgresql://` URL, or a libpq string with a
    /// `host=`, `dbname=` or `service=`-style key.
    pub fn looks_like_postgres(spec: &str) -> bool {
        let spec = spec.trim_start();
        spec.starts_with("postgres://")
            || spec.starts_with("postgresql://")
            || ["host=", "hostaddr=", "dbname=", "user=", "port="]
                .iter()
                .any(|key| spec.starts_with(key) || spec.contains(&format!(" {key}")))
    }

    /// Parses `spec`, refusing any password in it, and fills the password
    /// from `PGPASSWORD` or the password file.
    pub fn parse(spec: &str) -> Result<StoreSpec, ConfigError> {
        let spec = spec.trim();
        let Split {
            rest,
            schema,
            passfile,
            tls,
        } = if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            split_url(spec)?
        } else {
            split_pairs(spec)?
        };
        if let Some(schema) = &schema
            && !valid_schema(schema)
        {
            return Err(ConfigError::BadSchema(schema.clone()));
        }
        let mut config = tokio_postgres::Config::from_str(&rest)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if config.get_password().is_some() {
            return Err(ConfigError::PasswordInString);
        }
        let unix_only = config.get_hostaddrs().is_empty()
            && !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|host| !matches!(host, tokio_postgres::config::Host::Tcp(_)));
        let tls = tls::resolve(tls, unix_only).map_err(ConfigError::Tls)?;
        config.ssl_mode(match tls.mode {
            tls::SslMode::Disable | tls::SslMode::Allow => tokio_postgres::config::SslMode::Disable,
            tls::SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            tls::SslMode::Require | tls::SslMode::VerifyCa | tls::SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        if let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
            config.password(password.as_encoded_bytes());
        } else if let Some(password) = from_passfile(&config, passfile) {
            config.password(password);
        }
        Ok(StoreSpec {
            config,
            schema,
            tls,
        })
    }
}

/// The largest password or certificate file read.
pub(crate) const MAX_SMALL_FILE_BYTES: u64 = 1 << 20;

/// The text of a small regular file the connection string names (a password
/// file, a certificate): a directory, FIFO or device is refused before it
/// is read, and more than [`MAX_SMALL_FILE_BYTES`] is an error.
pub(crate) fn read_small(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is not a regular file",
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_SMALL_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SMALL_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_SMALL_FILE_BYTES} bytes"),
        ));
    }
    Ok(text)
}

/// The URL without `schema=`, `passfile=` and the TLS parameters, and those.
fn split_url(spec: &str) -> Result<Split, ConfigError> {
    let (head, query) = match spec.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (spec, None),
    };
    // A password is `user:password@` in the authority.
    let authority = head
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
        .unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && userinfo.contains(':')
    {
        return Err(ConfigError::PasswordInString);
    }
    let (mut split, mut kept) = (Split::default(), Vec::new());
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "schema" => split.schema = Some(value.to_owned()),
            "passfile" => split.passfile = Some(PathBuf::from(percent_decode(value))),
            "password" => return Err(ConfigError::PasswordInString),
            _ => match split.tls.take(key, &percent_decode(value)) {
                Ok(true) => {}
                Ok(false) => kept.push(pair),
                Err(key) => return Err(ConfigError::UnsupportedTls(key)),
            },
        }
    }
    split.rest = if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok(split)
}

/// A URL query value with its `%XX` escapes decoded, as the client decodes
/// the values it reads itself (with the same crate); an invalid escape is
/// kept as written.
fn percent_decode(value: &str) -> String {
    percent_encoding::percent_decode_str(value)
        .decode_utf8_lossy()
        .into_owned()
}

/// The key=value string without `schema=`, `passfile=` and the TLS
/// parameters, and those. Values may be single-quoted with `\'` and `\\`
/// escapes, as libpq's.
fn split_pairs(spec: &str) -> Result<Split, ConfigError> {
    let (mut split, mut kept) = (Split::default(), Vec::new());
    let mut chars = spec.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(ConfigError::Invalid(format!("expected `=` after `{key}`")));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    Some((_, '\\')) => {
                        if let Some((_, c)) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some((_, '\'')) => break,
                    Some((_, c)) => value.push(c),
                    None => {
                        return Err(ConfigError::Invalid(format!(
                            "unterminated quoted value of `{key}`"
                        )));
                    }
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                value.push(c);
            }
        }
        let end = chars.peek().map_or(spec.len(), |&(at, _)| at);
        match key.as_str() {
            "schema" => split.schema = Some(value),
            "passfile" => split.passfile = Some(PathBuf::from(value)),
            "password" => return Err(ConfigError::PasswordInString),
            _ => match split.tls.take(&key, &value) {
                Ok(true) => {}
                Ok(false) => kept.push(&spec[start..end]),
                Err(key) => return Err(ConfigError::UnsupportedTls(key)),
            },
        }
    }
    split.rest = kept.iter().map(|s| s.trim()).collect::<Vec<_>>().join(" ");
    Ok(split)
}

/// Whether `name` may be used unquoted as the store's schema.
pub(crate) fn valid_schema(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

/// The host names or socket directories a configuration connects to.
fn hosts(config: &tokio_postgres::Config) -> Vec<String> {
    config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect()
}

/// `postgres host=… port=… dbname=… schema=…`, for the operator's
/// messages and log (never for a policed server: `docs/spec/frames.md`,
/// "Store failures"): never the password.
pub(crate) fn describe(config: &tokio_postgres::Config, schema: &str) -> String {
    let hosts = hosts(config);
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres host={} port={} dbname={} schema={schema}",
        if hosts.is_empty() {
            "localhost".to_owned()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(default)")
    )
}

/// The password a libpq password file gives this connection: the first line
/// `host:port:database:user:password` whose fields match (`*` matches
/// anything; `\:` and `\\` escape). Like libpq, a file readable by group or
/// others is ignored.
fn from_passfile(config: &tokio_postgres::Config, explicit: Option<PathBuf>) -> Option<String> {
    let path = explicit
        .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            return None;
        }
    }
    // A FIFO or a device would block or never end: regular files only, and
    // no more than a password file can need.
    if !meta.is_file() {
        return None;
    }
    let text = read_small(&path).ok()?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
        // libpq matches a socket connection against `localhost`.
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(_)) => "localhost".to_owned(),
        None => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default().to_owned();
    let dbname = config.get_dbname().unwrap_or(&user).to_owned();
    let wanted = [host, port, dbname, user];
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = passfile_fields(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(&wanted)
                .all(|(field, want)| field == "*" || field == want);
            matches.then(|| fields[4].clone())
        })
}

/// The `:`-separated fields of a password file line, unescaped.
fn passfile_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_pairs_lose_schema_and_keep_the_rest() {
        let split =
            split_url("postgres://u@h:5433/db?schema=team_a&connect_timeout=3").expect("url");
        assert_eq!(split.rest, "postgres://u@h:5433/db?connect_timeout=3");
        assert_eq!(split.schema.as_deref(), Some("team_a"));
        let split = split_pairs("host=/tmp/x  schema=b dbname='my db' passfile=/p").expect("pairs");
        assert_eq!(split.rest, "host=/tmp/x dbname='my db'");
        assert_eq!(split.schema.as_deref(), Some("b"));
        assert_eq!(split.passfile, Some(PathBuf::from("/p")));
    }

    #[test]
    fn tls_parameters_are_read_here_and_kept_from_the_client() {
        let split = split_url(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem&sslnegotiation=postgres",
        )
        .expect("url");
        assert_eq!(split.rest, "postgres://u@h/db?sslnegotiation=postgres");
        assert_eq!(split.tls.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(split.tls.sslrootcert.as_deref(), Some("/etc/ca x.pem"));
        // An escape that is not one is kept as written.
        let split = split_url("postgres://u@h/db?sslrootcert=/ca%zz%2.pem").expect("url");
        assert_eq!(split.tls.sslrootcert.as_deref(), Some("/ca%zz%2.pem"));
        let split =
            split_pairs("host=h sslmode=verify-ca sslrootcert='/a b.pem' sslcert=/c sslkey=/k")
                .expect("pairs");
        assert_eq!(split.rest, "host=h");
        assert_eq!(split.tls.sslrootcert.as_deref(), Some("/a b.pem"));
        assert_eq!(split.tls.sslkey.as_deref(), Some("/k"));
        let spec = StoreSpec::parse("host=db.example sslmode=verify-ca sslrootcert=/ca.pem")
            .expect("parse");
        assert_eq!(spec.tls.mode, tls::SslMode::VerifyCa);
        assert_eq!(
            spec.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        for (spec, want) in [
            ("host=h sslmode=verify", "sslmode=verify is not a mode"),
            ("postgres://h/db?sslcrl=/x", "`sslcrl` is not supported"),
            (
                "host=h sslmode=verify-full sslrootcert=system sslcert=/c",
                "sslkey",
            ),
        ] {
            let error = StoreSpec::parse(spec).expect_err(spec).to_string();
            assert!(error.contains(want), "{spec}: {error}");
        }
    }

    #[test]
    fn a_password_in_the_string_is_refused() {
        for spec in [
            "postgres://u:secret@h/db",
            "postgresql://u:@h/db",
            "postgres://u@h/db?password=x",
            "host=h password=secret",
            "host=h password='a b'",
        ] {
            assert!(
                matches!(StoreSpec::parse(spec), Err(ConfigError::PasswordInString)),
                "{spec}"
            );
        }
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(valid_schema("mcpolicy_team_a1"));
        for bad in ["", "A", "1a", "a-b", "a;drop", &"a".repeat(64)] {
            assert!(!valid_schema(bad), "{bad}");
        }
        assert!(matches!(
            StoreSpec::parse("host=h schema=Bad"),
            Err(ConfigError::BadSchema(_))
        ));
    }

    #[test]
    fn password_file_lines_match_with_wildcards_and_escapes() {
        assert_eq!(
            passfile_fields(r"h:5432:*:u:pa\:ss\\word"),
            ["h", "5432", "*", "u", r"pa:ss\word"]
        );
    }

    #[test]
    fn what_looks_like_postgres() {
        assert!(StoreSpec::looks_like_postgres("postgres://h/db"));
        assert!(StoreSpec::looks_like_postgres("host=/tmp dbname=x"));
        assert!(!StoreSpec::looks_like_postgres("decisions.db"));
        assert!(!StoreSpec::looks_like_postgres("./host=x.db"));
    }
}
