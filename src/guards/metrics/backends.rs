//! The backends' families of `/metrics`: per backend, the calls forwarded and failed, its
//! state, what it left out of its list of tools, and the admission of its calls (in flight,
//! waiting, refused by reason, its circuit). Every label value is a configured backend name
//! or a word of a fixed list.

use super::{header, histogram, sample};
use crate::tools::backends::{
    AdmissionStatus, BackendCount, BackendStatus, Backends, Circuit, Health, LeftOutReason,
    ListingReport, Rejection,
};

/// Appends the backends' families to `page`: calls forwarded and failed per backend, each
/// backend's state (1 when ready), its listing and its admission. Nothing when no backend
/// is configured.
pub fn render_backends(page: &mut String, backends: &Backends) {
    if backends.is_empty() {
        return;
    }
    let counters = backends.counters();
    let family = |page: &mut String, name: &str, help: &str, value: fn(&BackendCount) -> u64| {
        header(page, name, "counter", help);
        for count in &counters {
            sample(page, name, &[("backend", &count.name)], value(count));
        }
    };
    family(
        page,
        "tollgate_backend_calls_total",
        "Calls forwarded to a backend, by backend.",
        |c| c.calls,
    );
    family(
        page,
        "tollgate_backend_failures_total",
        "Forwarded calls that failed (any catalog error), by backend.",
        |c| c.failures,
    );
    let name = "tollgate_backend_call_duration_seconds";
    header(
        page,
        name,
        "histogram",
        "Time of a call forwarded to a backend, the wait for admission included, by backend.",
    );
    for count in &counters {
        histogram(page, name, &[("backend", &count.name)], &count.durations);
    }
    let statuses = backends.status();
    let name = "tollgate_backend_up";
    header(
        page,
        name,
        "gauge",
        "Whether a backend can be called now (1) or not (0), by backend and kind.",
    );
    for status in &statuses {
        let up = u64::from(status.health == Health::Ready);
        sample(
            page,
            name,
            &[("backend", &status.name), ("kind", status.kind)],
            up,
        );
    }
    render_listings(page, &statuses);
    render_admission(page, &statuses);
}

/// The backends' listing families: tools left out by reason, descriptions cut, and how
/// often an upstream's list was read again after it said it changed.
fn render_listings(page: &mut String, statuses: &[BackendStatus]) {
    let name = "tollgate_backend_tools_left_out";
    header(
        page,
        name,
        "gauge",
        "Tools a backend lists that are not offered now, by backend and reason.",
    );
    for status in statuses {
        for reason in LeftOutReason::ALL {
            let n = status.listing.left_out.get(&reason).copied().unwrap_or(0);
            let labels = [
                ("backend", status.name.as_str()),
                ("reason", reason.as_str()),
            ];
            sample(page, name, &labels, u64::try_from(n).unwrap_or(u64::MAX));
        }
    }
    let family = |page: &mut String,
                  name: &str,
                  kind: &str,
                  help: &str,
                  value: fn(&ListingReport) -> u64| {
        per_backend(page, statuses, (name, kind, help), |s| value(&s.listing));
    };
    family(
        page,
        "tollgate_backend_descriptions_cut",
        "gauge",
        "Tools offered now whose description was cut to the length limit, by backend.",
        |l| u64::try_from(l.descriptions_cut).unwrap_or(u64::MAX),
    );
    family(
        page,
        "tollgate_backend_tools_held",
        "gauge",
        "Tools held for review because their definition changed since approved (or is new under manual pinning), by backend.",
        |l| u64::try_from(l.held).unwrap_or(u64::MAX),
    );
    family(
        page,
        "tollgate_backend_list_changed_total",
        "counter",
        "notifications/tools/list_changed received from an upstream MCP server, by backend.",
        |l| l.list_changed,
    );
    family(
        page,
        "tollgate_backend_list_changed_coalesced_total",
        "counter",
        "Of those, the ones folded into a re-read of the list already due, by backend.",
        |l| l.list_changed_coalesced,
    );
    family(
        page,
        "tollgate_backend_relists_total",
        "counter",
        "Reads of an upstream's list of tools after it said the list changed (at most one per second), by backend.",
        |l| l.relists,
    );
}

/// The backends' admission families: calls in flight and waiting, whether the circuit is
/// open, the calls refused by reason and the times the circuit opened.
fn render_admission(page: &mut String, statuses: &[BackendStatus]) {
    let family = |page: &mut String,
                  name: &str,
                  kind: &str,
                  help: &str,
                  value: fn(&AdmissionStatus) -> u64| {
        per_backend(page, statuses, (name, kind, help), |s| value(&s.admission));
    };
    family(
        page,
        "tollgate_backend_in_flight",
        "gauge",
        "Calls being forwarded to a backend now (at most its max_in_flight), by backend.",
        |a| a.in_flight as u64,
    );
    family(
        page,
        "tollgate_backend_queued",
        "gauge",
        "Calls waiting for one of a backend's slots now (at most its queue), by backend.",
        |a| a.queued as u64,
    );
    family(
        page,
        "tollgate_backend_circuit_open",
        "gauge",
        "Whether a backend's circuit is open or half-open (1: calls are refused without reaching it, but for one trial) or closed (0), by backend.",
        |a| u64::from(a.circuit != Circuit::Closed),
    );
    let name = "tollgate_backend_rejected_total";
    header(
        page,
        name,
        "counter",
        "Calls not forwarded to a backend, by backend and reason: queue_full, queue_timeout, circuit_open.",
    );
    for status in statuses {
        for reason in Rejection::ALL {
            let labels = [
                ("backend", status.name.as_str()),
                ("reason", reason.as_str()),
            ];
            sample(page, name, &labels, status.admission.rejected(reason));
        }
    }
    family(
        page,
        "tollgate_backend_circuit_opened_total",
        "counter",
        "Times a backend's circuit opened after consecutive failures (a failed trial call included), by backend.",
        |a| a.circuit_opened,
    );
}

/// One family (name, type, help) with a sample per backend.
fn per_backend(
    page: &mut String,
    statuses: &[BackendStatus],
    (name, kind, help): (&str, &str, &str),
    value: impl Fn(&BackendStatus) -> u64,
) {
    header(page, name, kind, help);
    for status in statuses {
        sample(page, name, &[("backend", &status.name)], value(status));
    }
}
