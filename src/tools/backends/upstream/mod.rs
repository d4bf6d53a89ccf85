//! Placeholder while the upstream backend is written.

use std::sync::Arc;

use crate::config::BackendConfig;
use crate::tools::backends::{Backend, BackendEnv, BackendProblem};

/// Opens the backend `config` describes.
pub fn open(config: &BackendConfig, _env: &BackendEnv) -> Result<Arc<dyn Backend>, BackendProblem> {
    Err(BackendProblem {
        backend: config.name.clone(),
        message: "this kind of backend is not available in this build".into(),
    })
}
