//! The names the console shows for the ids it reads: an API key's name, an OAuth
//! client's name, a provider user's display name (or subject). A page reads them once
//! ([`Names::read`]: every key and client, and the users among the ids it will show) and
//! shows each credential, user or client by its name, the id kept in the element's
//! `title` (and on the audit row's own page). An id that names nothing known (a
//! credential deleted since, a plan's slug, a bucket of another kind) is shown as it is.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::store::{Store, StoreError};

/// Names by id: credentials (API keys and users) and OAuth clients apart, as their ids
/// come from different places.
#[derive(Debug, Default)]
pub(super) struct Names {
    credentials: HashMap<String, String>,
    clients: HashMap<String, String>,
}

impl Names {
    /// Every API key's and OAuth client's name, and the names of the provider users among
    /// `ids` (three reads).
    pub(super) fn read(store: &Store, ids: &[&str]) -> Result<Names, StoreError> {
        let mut credentials: HashMap<String, String> = store
            .api_keys()?
            .into_iter()
            .map(|k| (k.public_id, k.name))
            .collect();
        for user in store.users_among(ids)? {
            credentials.insert(user.id.clone(), user.label().to_owned());
        }
        let clients = store
            .clients()?
            .into_iter()
            .map(|c| (c.client_id, c.name))
            .collect();
        Ok(Names {
            credentials,
            clients,
        })
    }

    /// The name of credential (or user) `id`, when it is known and not empty.
    pub(super) fn credential(&self, id: &str) -> Option<&str> {
        non_empty(self.credentials.get(id))
    }

    /// The name of OAuth client `id`, when it is known and not empty.
    pub(super) fn client(&self, id: &str) -> Option<&str> {
        non_empty(self.clients.get(id))
    }

    /// The name of whatever `id` names: a credential, a user or a client.
    pub(super) fn any(&self, id: &str) -> Option<&str> {
        self.credential(id).or_else(|| self.client(id))
    }

    /// A credential as the templates show it: `{id, name}`, the name falling back to the
    /// id (`named` says which); `null` for none.
    pub(super) fn credential_json(&self, id: Option<&str>) -> Value {
        shown(id, |id| self.credential(id))
    }

    /// A client as the templates show it (see [`Names::credential_json`]).
    pub(super) fn client_json(&self, id: Option<&str>) -> Value {
        shown(id, |id| self.client(id))
    }

    /// Anything named by `id` as the templates show it (see [`Names::credential_json`]).
    pub(super) fn any_json(&self, id: &str) -> Value {
        shown(Some(id), |id| self.any(id))
    }

    /// Adds (or replaces) the name of credential `id`.
    #[cfg(test)]
    pub(super) fn with_credential(mut self, id: &str, name: &str) -> Names {
        self.credentials.insert(id.to_owned(), name.to_owned());
        self
    }
}

fn non_empty(name: Option<&String>) -> Option<&str> {
    name.map(|n| n.trim()).filter(|n| !n.is_empty())
}

fn shown<'a>(id: Option<&'a str>, name: impl Fn(&'a str) -> Option<&'a str>) -> Value {
    match id {
        None => Value::Null,
        Some(id) => match name(id) {
            Some(name) => json!({"id": id, "name": name, "named": true}),
            None => json!({"id": id, "name": id, "named": false}),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_shows_as_its_name_and_an_unknown_one_as_itself() {
        let names = Names::default()
            .with_credential("eff5e5508280ebf54e99", "operator")
            .with_credential("blank", "  ");
        assert_eq!(
            names.credential_json(Some("eff5e5508280ebf54e99")),
            json!({"id": "eff5e5508280ebf54e99", "name": "operator", "named": true})
        );
        assert_eq!(
            names.credential_json(Some("gone")),
            json!({"id": "gone", "name": "gone", "named": false})
        );
        // An empty name is no name.
        assert_eq!(names.credential_json(Some("blank"))["named"], false);
        assert_eq!(names.credential_json(None), Value::Null);
        assert_eq!(names.client("eff5e5508280ebf54e99"), None);
        assert_eq!(names.any("eff5e5508280ebf54e99"), Some("operator"));
    }
}
