//! tollgate's OAuth 2.1 authorization server: the front door through which MCP hosts
//! (Claude, ChatGPT, editors) sign their people in.
//!
//! A host registers (RFC 7591, `register`) or names a client metadata document
//! (`client_document`, fetched behind `address`'s guard against server-side request
//! forgery); it sends the person to `/oauth/authorize` (`authorize`) with PKCE; the person
//! signs in at the company's identity provider (OpenID Connect, [`crate::identity`]) or
//! with a personal key, consents per client, and the host exchanges the code at the token
//! endpoint (`token`) for an access token bound to tollgate's MCP endpoint and a rotating
//! refresh token; `revoke` ends them (RFC 7009), `metadata` describes it all (RFC 8414,
//! RFC 9728). State lives in [`crate::store::oauth`], so every node serves every step.
//!
//! This layer sits above the guards (it signs people in with the authenticator) and below
//! the console and the transport, which render its pages and write its answers.

pub mod address;
mod authorize;
pub mod client_document;
mod clients;
mod core;
mod metadata;
mod outcomes;
mod register;
mod revoke;
mod sign_in;
mod token;

pub use self::core::{AuthorizationServer, Context, OAuthError, Page, REQUEST_COOKIE, Reply};
pub use clients::{Client, ClientAuth, redirect_matches};
pub use metadata::{SCOPES, supported_scopes};
pub use register::MAX_REGISTRATION_BYTES;
pub use token::{CLIENT_TOKEN_TTL, TOKEN_REQUESTS_PER_MINUTE};

#[cfg(test)]
mod tests;
