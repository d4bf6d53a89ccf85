//! The scopes a credential can usefully hold, and the closest of them to a mistyped one.
//!
//! A scope is known when something honours it: `*` and `admin` ([`SUPER_SCOPE`],
//! [`ADMIN_SCOPE`]; [`grants`] knows no other wildcard), the scope of each built-in tool
//! (per action: `invoices:void`), and the scopes of each configured backend's tools (per
//! category: `crm:read`), derived from the configuration alone, since an upstream's tools
//! are unknown until it answers ([`configured_scopes`]). A well-formed scope nothing
//! honours would give its key an empty `tools/list` and no warning, so the command line
//! and the console refuse it ([`KnownScopes::check`]) with the closest known names.

use std::borrow::Cow;

use super::*;
use crate::config::BackendConfig;
use crate::tools::backends::configured_scopes;

/// At most this many "did you mean" suggestions.
pub const MAX_SUGGESTIONS: usize = 3;

/// Where a known scope comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScopeGroup {
    /// `*` or `admin`.
    Special,
    /// A built-in tool's, by its resource (`invoices` of `invoices:read`).
    BuiltIn(String),
    /// A configured backend's, by the backend's name.
    Backend(String),
}

/// One known scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownScope {
    /// The scope, e.g. `invoices:read`.
    pub scope: String,
    /// Where it comes from.
    pub group: ScopeGroup,
}

/// A scope nothing honours, with what the operator most likely meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScope {
    /// The scope as given.
    pub scope: String,
    /// The closest known scopes, closest first (at most [`MAX_SUGGESTIONS`]).
    pub suggestions: Vec<String>,
    /// Its resource when that is no built-in resource, no configured backend and not a
    /// near miss of either: a backend that is not configured (here).
    pub unconfigured_backend: Option<String>,
}

/// Every scope a credential can usefully hold, with this build and configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownScopes {
    scopes: Vec<KnownScope>,
}

/// The scopes the built-in tools need: the invoicing back office's and, with
/// `conformance_pack` in a build that carries it, the conformance fixtures'.
fn builtin_scopes(conformance_pack: bool) -> Vec<Cow<'static, str>> {
    crate::tools::invoicing::tools()
        .iter()
        .map(|t| t.spec().scope.clone())
        .chain(conformance_scope(conformance_pack).map(Cow::Borrowed))
        .collect()
}

/// The conformance fixtures' scope when they are asked for.
#[cfg(feature = "conformance-pack")]
fn conformance_scope(conformance_pack: bool) -> Option<&'static str> {
    conformance_pack.then_some(crate::tools::conformance::SCOPE)
}

/// A build without the fixtures has no scope for them.
#[cfg(not(feature = "conformance-pack"))]
fn conformance_scope(_conformance_pack: bool) -> Option<&'static str> {
    None
}

/// Orders the actions of one resource: `read`, then `write`, then the rest by name.
fn action_rank(scope: &str) -> (u8, &str) {
    let action = scope.split_once(':').map_or(scope, |(_, a)| a);
    let rank = match action {
        "read" => 0,
        "write" => 1,
        _ => 2,
    };
    (rank, action)
}

impl KnownScopes {
    /// The known scopes with the backends of `backends` configured and, when
    /// `conformance_pack` (and the build carries it), the conformance fixtures: special
    /// first, then the built-in ones by resource, then each backend's in configuration
    /// order.
    pub fn new(backends: &[BackendConfig], conformance_pack: bool) -> KnownScopes {
        let mut scopes: Vec<KnownScope> = [SUPER_SCOPE, ADMIN_SCOPE, APPROVE_SCOPE]
            .iter()
            .map(|s| KnownScope {
                scope: (*s).to_owned(),
                group: ScopeGroup::Special,
            })
            .collect();
        let mut builtin = builtin_scopes(conformance_pack);
        builtin.sort_by(|a, b| {
            let resource = |s: &str| s.split(':').next().unwrap_or_default().to_owned();
            (resource(a), action_rank(a)).cmp(&(resource(b), action_rank(b)))
        });
        builtin.dedup();
        for scope in builtin {
            let resource = scope.split(':').next().unwrap_or_default();
            scopes.push(KnownScope {
                group: ScopeGroup::BuiltIn(resource.to_owned()),
                scope: scope.into_owned(),
            });
        }
        for backend in backends {
            for scope in configured_scopes(backend) {
                if !scopes.iter().any(|k| k.scope == scope) {
                    scopes.push(KnownScope {
                        scope,
                        group: ScopeGroup::Backend(backend.name.clone()),
                    });
                }
            }
        }
        KnownScopes { scopes }
    }

    /// Every known scope, in the order of [`KnownScopes::new`].
    pub fn all(&self) -> &[KnownScope] {
        &self.scopes
    }

    /// Whether `scope` is known.
    pub fn contains(&self, scope: &str) -> bool {
        self.scopes.iter().any(|k| k.scope == scope)
    }

    /// The known scopes closest to `scope`, closest first, at most [`MAX_SUGGESTIONS`]:
    /// those within a small edit distance (a transposition counts as one edit); failing
    /// that, the scopes of the same resource.
    pub fn suggest(&self, scope: &str) -> Vec<String> {
        let limit = if scope.chars().count() <= 4 { 1 } else { 2 };
        let mut near: Vec<(usize, &str)> = self
            .scopes
            .iter()
            .map(|k| (strsim::osa_distance(scope, &k.scope), k.scope.as_str()))
            .filter(|(distance, _)| *distance <= limit)
            .collect();
        if near.is_empty()
            && let Some((resource, _)) = scope.split_once(':')
        {
            near = self
                .scopes
                .iter()
                .filter(|k| k.scope.split_once(':').is_some_and(|(r, _)| r == resource))
                .map(|k| (strsim::osa_distance(scope, &k.scope), k.scope.as_str()))
                .collect();
        }
        near.sort();
        near.into_iter()
            .take(MAX_SUGGESTIONS)
            .map(|(_, s)| s.to_owned())
            .collect()
    }

    /// Whether `resource` is the resource of a known scope.
    fn has_resource(&self, resource: &str) -> bool {
        self.scopes
            .iter()
            .any(|k| k.scope.split_once(':').is_some_and(|(r, _)| r == resource))
    }

    /// What is wrong with `scope` when it is not known.
    pub fn unknown(&self, scope: &str) -> UnknownScope {
        let suggestions = self.suggest(scope);
        let resource = scope.split_once(':').map(|(r, _)| r);
        let near_miss = |r: &str| {
            suggestions.iter().any(|s| {
                s.split_once(':')
                    .is_some_and(|(known, _)| strsim::osa_distance(known, r) <= 1)
            })
        };
        let unconfigured_backend = resource
            .filter(|r| !self.has_resource(r) && !near_miss(r))
            .map(str::to_owned);
        UnknownScope {
            scope: scope.to_owned(),
            suggestions,
            unconfigured_backend,
        }
    }

    /// `Ok` when every scope of `scopes` (already well-formed) is known; otherwise the
    /// first that is not, with its suggestions.
    pub fn check(&self, scopes: &[String]) -> Result<(), CredentialError> {
        match scopes.iter().find(|s| !self.contains(s)) {
            Some(scope) => Err(CredentialError::UnknownScope(self.unknown(scope))),
            None => Ok(()),
        }
    }

    /// Parses a comma-separated list of scopes ([`parse_scope_list`]) and [`check`]s that
    /// each is known.
    ///
    /// [`check`]: KnownScopes::check
    pub fn parse_list(&self, list: &str) -> Result<Vec<String>, CredentialError> {
        let scopes = parse_scope_list(list)?;
        self.check(&scopes)?;
        Ok(scopes)
    }
}

impl fmt::Display for UnknownScope {
    /// The command line's message: the scope, the closest known ones, and where to look.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown scope {:?}: no tool needs it.", self.scope)?;
        match self.suggestions.as_slice() {
            [] => {}
            [one] => write!(f, " Did you mean {one}?")?,
            many => write!(f, " Did you mean one of {}?", many.join(", "))?,
        }
        if let Some(backend) = &self.unconfigured_backend {
            write!(
                f,
                " No backend named {backend:?} is configured: a backend's scopes are known once \
                 its [[backends]] entry is in the configuration (--config FILE or TOLLGATE_CONFIG)."
            )?;
        }
        f.write_str(" Run `tollgate tools` to list every tool and its scope.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendKind, McpTransport};

    fn backend(name: &str) -> BackendConfig {
        BackendConfig {
            name: name.to_owned(),
            kind: BackendKind::Mcp(crate::config::McpBackend {
                transport: McpTransport::Http {
                    url: "http://127.0.0.1:1/mcp".to_owned(),
                    headers: Default::default(),
                },
                max_tools: crate::config::DEFAULT_MAX_TOOLS,
                max_schema_bytes: crate::config::DEFAULT_MAX_SCHEMA_BYTES,
                pinning: crate::config::Pinning::FirstUse,
                expose: crate::config::Exposed::ALL,
                read_scope: None,
            }),
            timeout: Duration::from_secs(1),
            limits: crate::config::BackendLimits::default(),
            tools: Default::default(),
        }
    }

    fn unknown(known: &KnownScopes, scope: &str) -> UnknownScope {
        match known.check(&[scope.to_owned()]) {
            Err(CredentialError::UnknownScope(unknown)) => unknown,
            other => panic!("{scope}: {other:?}"),
        }
    }

    #[test]
    fn the_special_built_in_and_configured_backend_scopes_are_known() {
        let known = KnownScopes::new(&[backend("crm")], false);
        let scopes: Vec<&str> = known.all().iter().map(|k| k.scope.as_str()).collect();
        assert_eq!(&scopes[..2], ["*", "admin"]);
        for scope in [
            "clients:read",
            "clients:write",
            "clients:delete",
            "invoices:read",
            "invoices:write",
            "invoices:void",
            "invoices:send",
            "payments:write",
            "reports:generate",
            "crm:read",
            "crm:write",
            "crm:destructive",
        ] {
            assert!(known.contains(scope), "{scope}");
        }
        assert!(!known.contains("crm:send"));
        assert_eq!(
            known.all().last().map(|k| &k.group),
            Some(&ScopeGroup::Backend("crm".to_owned()))
        );
        assert_eq!(
            known.all()[2],
            KnownScope {
                scope: "approve".to_owned(),
                group: ScopeGroup::Special
            }
        );
        assert_eq!(
            known.all()[3],
            KnownScope {
                scope: "clients:read".to_owned(),
                group: ScopeGroup::BuiltIn("clients".to_owned())
            }
        );
        assert!(!known.contains("conformance:use"));
        assert_eq!(
            KnownScopes::new(&[], true).contains("conformance:use"),
            crate::HAS_CONFORMANCE_PACK
        );
    }

    #[test]
    fn a_mistyped_scope_is_refused_with_the_closest_known_ones() {
        let known = KnownScopes::new(&[], false);
        let raed = unknown(&known, "invoices:raed");
        assert_eq!(raed.suggestions, ["invoices:read"]);
        assert_eq!(raed.unconfigured_backend, None);
        assert_eq!(
            raed.to_string(),
            "unknown scope \"invoices:raed\": no tool needs it. Did you mean invoices:read? \
             Run `tollgate tools` to list every tool and its scope."
        );
        let client = unknown(&known, "client:read");
        assert_eq!(client.suggestions, ["clients:read"]);
        assert_eq!(client.unconfigured_backend, None);
        assert_eq!(unknown(&known, "admn").suggestions, ["admin"]);
        // Nothing close: the scopes of the same resource, at most three.
        let delete = unknown(&known, "invoices:delete");
        assert_eq!(delete.suggestions.len(), MAX_SUGGESTIONS);
        assert!(
            delete
                .suggestions
                .iter()
                .all(|s| s.starts_with("invoices:")),
            "{delete:?}"
        );
        assert!(
            known
                .check(&["invoices:read".to_owned(), "*".to_owned()])
                .is_ok()
        );
    }

    #[test]
    fn a_backend_scope_is_known_only_while_the_backend_is_configured() {
        let without = KnownScopes::new(&[], false);
        let crm = unknown(&without, "crm:read");
        assert_eq!(crm.unconfigured_backend.as_deref(), Some("crm"));
        assert!(crm.suggestions.is_empty(), "{crm:?}");
        assert!(
            crm.to_string()
                .contains("No backend named \"crm\" is configured")
        );
        let with = KnownScopes::new(&[backend("crm")], false);
        assert!(with.parse_list("crm:read,invoices:read").is_ok());
        let typo = unknown(&with, "crm:raed");
        assert_eq!(typo.suggestions, ["crm:read"]);
        assert_eq!(typo.unconfigured_backend, None);
    }

    #[test]
    fn a_malformed_scope_is_still_a_bad_scope() {
        let known = KnownScopes::new(&[], false);
        assert!(matches!(
            known.parse_list("Invoices"),
            Err(CredentialError::BadScope(_))
        ));
    }
}
