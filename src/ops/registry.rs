//! The registry of what the server offers: the configured tool packs (the invoicing back
//! office always; the conformance suite's fixtures when asked for and compiled in) and the
//! tools of the configured backends beside them.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Config;
use crate::store::Store;
use crate::tools::Registry;

/// Why `--conformance-pack` (`tools.conformance_pack`, `TOLLGATE_CONFORMANCE_PACK`) is
/// refused by a build without the fixtures.
pub(super) const NO_CONFORMANCE_PACK: &str = "the conformance pack was asked for (--conformance-pack, \
    tools.conformance_pack or TOLLGATE_CONFORMANCE_PACK), but this build of tollgate does not \
    carry it: it is compiled in only with `cargo build --features conformance-pack`, for \
    testing; release builds and the .deb never have it";

/// The registry of the configured tool packs: the invoicing back office (the embedded
/// default, always registered) and, when configured, the conformance fixtures.
pub(super) fn build_registry(
    config: &Config,
    store: &Store,
    clock: &Clock,
) -> Result<Registry, String> {
    build_registry_with(config, store, clock, Vec::new())
}

/// [`build_registry`] with the tools of the configured backends beside the packs'; a
/// backend tool named like another tool is refused by name.
pub(super) fn build_registry_with(
    config: &Config,
    store: &Store,
    clock: &Clock,
    backend_tools: Vec<Arc<dyn crate::tools::Tool>>,
) -> Result<Registry, String> {
    let mut tools = crate::tools::invoicing::tools();
    let mut resources = crate::tools::invoicing::resources();
    let mut prompts = crate::tools::invoicing::prompts(store.clone(), clock.clone());
    if config.tools.conformance_pack {
        add_conformance_pack(&mut tools, &mut resources, &mut prompts)?;
    }
    tools.extend(backend_tools);
    Registry::new(
        tools,
        crate::tools::invoicing::retired::RETIRED_TOOLS,
        resources,
        prompts,
    )
    .map_err(|e| e.to_string())
}

/// The tools, resources and prompts of the official conformance suite's fixtures.
#[cfg(feature = "conformance-pack")]
fn add_conformance_pack(
    tools: &mut Vec<Arc<dyn crate::tools::Tool>>,
    resources: &mut Vec<Arc<dyn crate::tools::ResourceProvider>>,
    prompts: &mut Vec<Arc<dyn crate::tools::Prompt>>,
) -> Result<(), String> {
    tools.extend(crate::tools::conformance::tools());
    resources.extend(crate::tools::conformance::resources());
    prompts.extend(crate::tools::conformance::prompts());
    Ok(())
}

/// A build without the `conformance-pack` feature has no fixtures to add.
#[cfg(not(feature = "conformance-pack"))]
fn add_conformance_pack(
    _tools: &mut Vec<Arc<dyn crate::tools::Tool>>,
    _resources: &mut Vec<Arc<dyn crate::tools::ResourceProvider>>,
    _prompts: &mut Vec<Arc<dyn crate::tools::Prompt>>,
) -> Result<(), String> {
    Err(NO_CONFORMANCE_PACK.to_owned())
}
