//! An OpenAPI document named by URL (`spec = "https://…"`): fetched when the backend
//! opens, with the backend's own client (rustls, no redirect followed, no proxy from the
//! environment) and no credential, within [`FETCH_DEADLINE`] and [`MAX_DOCUMENT_BYTES`].
//!
//! The last document that opened the backend is kept as its *last good copy* ([`Copies`]),
//! one file per backend and URL in [`COPIES_DIR`] beside the state (the SQLite file's
//! directory, or the working directory). When a later fetch fails, or what it brings
//! cannot be read, the backend opens from that copy, with a warning naming the cause (and
//! so the URL) and the copy's age; with no copy, the backend cannot be opened.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Client;
use reqwest::header::{ACCEPT, LOCATION};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::format_time;
use crate::config::SpecUrl;
use crate::tools::backends::BackendEnv;

/// The longest fetching a document may take, from connecting to its last byte.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(10);
/// The largest document fetched; a larger one is refused (a file has no such cap).
pub const MAX_DOCUMENT_BYTES: u64 = 8 * 1024 * 1024;
/// The directory, under the state directory, holding the last good copies.
pub const COPIES_DIR: &str = "backend-documents";

/// Where the last good copies of fetched documents are kept, and whether this process
/// writes them (`serve` and `stdio` do; `backends check` only reads them, as it may run as
/// another user than the service).
#[derive(Debug, Clone)]
pub struct Copies {
    dir: PathBuf,
    save: bool,
}

/// One last good copy, as written on disk.
#[derive(Debug, Serialize, Deserialize)]
struct Copy {
    /// The URL it was fetched from.
    url: String,
    /// When (Unix seconds, the server's clock).
    fetched_at: i64,
    /// The document's text.
    document: String,
}

impl Copies {
    /// The copies in [`COPIES_DIR`] under `state_dir`; with `save`, every document fetched
    /// and read replaces its backend's copy.
    pub fn beside(state_dir: &Path, save: bool) -> Copies {
        Copies {
            dir: state_dir.join(COPIES_DIR),
            save,
        }
    }

    /// The file of `backend`'s copy of `url`: named after both, so that a copy is never
    /// taken for the document of another URL.
    fn path_of(&self, backend: &str, url: &SpecUrl) -> PathBuf {
        let digest = Sha256::digest(url.as_str().as_bytes());
        let short = hex::encode(&digest[..8]);
        self.dir.join(format!("{backend}-{short}.json"))
    }

    /// `backend`'s copy of `url`, when there is one that reads.
    fn read(&self, backend: &str, url: &SpecUrl) -> Option<Copy> {
        let text = std::fs::read_to_string(self.path_of(backend, url)).ok()?;
        let copy: Copy = serde_json::from_str(&text).ok()?;
        (copy.url == url.as_str()).then_some(copy)
    }

    /// Replaces `backend`'s copy of `url` (a no-op unless this process saves copies):
    /// written to a private file beside it, then renamed over it, so that a reader never
    /// sees half of one.
    fn keep(&self, backend: &str, url: &SpecUrl, document: &str, now: i64) -> Result<(), String> {
        if !self.save {
            return Ok(());
        }
        let path = self.path_of(backend, url);
        let copy = Copy {
            url: url.as_str().to_owned(),
            fetched_at: now,
            document: document.to_owned(),
        };
        let write = || -> std::io::Result<()> {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
            let partial = path.with_extension(format!("partial-{}", std::process::id()));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&partial)?;
            file.write_all(&serde_json::to_vec(&copy).unwrap_or_default())?;
            file.sync_all()?;
            std::fs::rename(&partial, &path)
        };
        write().map_err(|e| {
            format!(
                "the document fetched from {url} could not be kept as its last good copy ({}: {e}); \
                 should a later fetch fail, the backend will not open",
                path.display()
            )
        })
    }
}

/// The document at `url`, made into `T` by `read`: fetched now (and kept as the last good
/// copy), or, when that fails, read from the last good copy. Gives `T` and the warnings
/// the operator should read; fails with the fetch's cause when there is no usable copy.
pub(super) fn open_url<T>(
    backend: &str,
    url: &SpecUrl,
    client: &Client,
    env: &BackendEnv,
    read: &dyn Fn(&str) -> Result<T, String>,
) -> Result<(T, Vec<String>), String> {
    let (copies, clock) = (&env.copies, &env.clock);
    let fresh = env
        .runtime
        .block_on(async { tokio::time::timeout(FETCH_DEADLINE, fetch(client, url)).await })
        .unwrap_or_else(|_| {
            Err(format!(
                "no complete answer within {} s",
                FETCH_DEADLINE.as_secs()
            ))
        })
        .map_err(|reason| format!("cannot fetch the OpenAPI document at {url}: {reason}"))
        .and_then(|text| read(&text).map(|document| (document, text)));
    let cause = match fresh {
        Ok((document, text)) => {
            let kept = copies.keep(backend, url, &text, clock.unix_secs());
            return Ok((document, kept.err().into_iter().collect()));
        }
        Err(cause) => cause,
    };
    let Some(copy) = copies.read(backend, url) else {
        return Err(cause);
    };
    match read(&copy.document) {
        Ok(document) => Ok((
            document,
            vec![stale_warning(&cause, copy.fetched_at, clock.unix_secs())],
        )),
        Err(e) => Err(format!(
            "{cause}; its last good copy ({}) cannot be read either: {e}",
            copies.path_of(backend, url).display()
        )),
    }
}

/// Fetches the document at `url`: its text, or why not (a short reason, never a secret).
async fn fetch(client: &Client, url: &SpecUrl) -> Result<String, String> {
    let mut response = client
        .get(url.as_str())
        .header(
            ACCEPT,
            "application/json, application/yaml;q=0.9, text/yaml;q=0.9, */*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| super::unreachable_reason(&e).to_owned())?;
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        return Err(format!(
            "it answered {status} towards {location:?}, and redirects are not followed: \
             set `spec` to the document's own URL"
        ));
    }
    if !status.is_success() {
        return Err(format!("it answered {status}"));
    }
    let too_large = || {
        format!(
            "the document is larger than {} MiB ({MAX_DOCUMENT_BYTES} bytes), the most tollgate \
             fetches; save it to a file and name the file in `spec`",
            MAX_DOCUMENT_BYTES / (1024 * 1024)
        )
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT_BYTES)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| "the connection closed before the whole document came".to_owned())?
    {
        if (body.len() + chunk.len()) as u64 > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "the document is not UTF-8 text".to_owned())
}

/// The warning of a backend opened from its last good copy: why the fresh document could
/// not be used, and how old the copy is.
fn stale_warning(cause: &str, fetched_at: i64, now: i64) -> String {
    format!(
        "{cause}; the backend opened from its last good copy, fetched {} ago ({})",
        age_text(now.saturating_sub(fetched_at)),
        format_time(fetched_at)
    )
}

/// An age in the unit an operator reads at a glance.
fn age_text(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} days", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> SpecUrl {
        SpecUrl::parse("http://127.0.0.1:8000/openapi.json").expect("url")
    }

    #[test]
    fn a_copy_is_kept_privately_per_backend_and_url() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().expect("tempdir");
        let copies = Copies::beside(state.path(), true);
        copies
            .keep("erp", &url(), "openapi: 3.1.0", 1_800_000_000)
            .expect("kept");
        let copy = copies.read("erp", &url()).expect("read back");
        assert_eq!(
            (copy.document.as_str(), copy.fetched_at),
            ("openapi: 3.1.0", 1_800_000_000)
        );
        let path = copies.path_of("erp", &url());
        assert!(path.starts_with(state.path().join(COPIES_DIR)));
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&state.path().join(COPIES_DIR)), 0o700);
        let other = SpecUrl::parse("https://erp.example.com/openapi.json").expect("url");
        assert!(copies.read("erp", &other).is_none(), "another URL's copy");
        assert!(
            copies.read("crm", &url()).is_none(),
            "another backend's copy"
        );
    }

    #[test]
    fn a_checking_process_reads_copies_but_never_writes_them() {
        let state = tempfile::tempdir().expect("tempdir");
        Copies::beside(state.path(), false)
            .keep("erp", &url(), "openapi: 3.1.0", 1)
            .expect("nothing to do");
        assert!(!state.path().join(COPIES_DIR).exists());
    }

    #[test]
    fn a_copy_that_cannot_be_written_says_where_and_what_follows() {
        let state = tempfile::tempdir().expect("tempdir");
        std::fs::write(state.path().join(COPIES_DIR), "a file, not a directory").expect("w");
        let err = Copies::beside(state.path(), true)
            .keep("erp", &url(), "openapi: 3.1.0", 1)
            .expect_err("not a directory");
        assert!(
            err.starts_with(
                "the document fetched from http://127.0.0.1:8000/openapi.json could not be kept"
            ) && err.contains("the backend will not open"),
            "{err}"
        );
    }

    #[test]
    fn the_warning_names_the_cause_and_the_age_of_the_copy() {
        let cause = "cannot fetch the OpenAPI document at http://127.0.0.1:8000/openapi.json: connection refused";
        assert_eq!(
            stale_warning(cause, 1_800_000_000, 1_800_000_000 + 3 * 3_600 + 5),
            format!(
                "{cause}; the backend opened from its last good copy, fetched 3 h ago (2027-01-15T08:00:00Z)"
            )
        );
        assert_eq!(age_text(-4), "0 s");
        assert_eq!(age_text(119), "119 s");
        assert_eq!(age_text(120), "2 min");
        assert_eq!(age_text(7_199), "119 min");
        assert_eq!(age_text(172_799), "47 h");
        assert_eq!(age_text(3 * 86_400), "3 days");
    }
}
