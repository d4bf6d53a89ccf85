//! The words of the latency page, of the charts' axes and of a bucket at its limit.
//! Merged into the console's one table by [`super::texts`], keys unique across all.

/// `(key, English, Spanish)`.
pub(super) const TEXTS: &[(&str, &str, &str)] = &[
    ("latency", "Latency", "Latencia"),
    (
        "latency_help",
        "How long calls took, from the duration the audit log records for each call (summary rows of refused calls are left out). p50 is the median; 95 and 99 calls in 100 took at most p95 and p99. Open a tool for its calls, or a slow call for its row.",
        "Cuánto tardaron las llamadas, según la duración que el registro de auditoría guarda de cada una (las filas que resumen llamadas rechazadas no cuentan). p50 es la mediana; 95 y 99 de cada 100 llamadas tardaron como mucho p95 y p99. Abra una herramienta para ver sus llamadas, o una llamada lenta para ver su fila.",
    ),
    ("latency_by_tool", "By tool", "Por herramienta"),
    ("latency_by_backend", "By backend", "Por sistema conectado"),
    ("last_hour", "Last hour", "Última hora"),
    ("last_day", "Last day", "Último día"),
    (
        "slowest_hour",
        "Slowest calls of the last hour",
        "Llamadas más lentas de la última hora",
    ),
    (
        "slowest_day",
        "Slowest calls of the last day",
        "Llamadas más lentas del último día",
    ),
    (
        "no_timed_calls",
        "No calls in this window.",
        "No hubo llamadas en este periodo.",
    ),
    (
        "latency_capped",
        "There were too many calls to read them all: these figures cover the newest {n}, back to {at}.",
        "Hubo demasiadas llamadas para leerlas todas: estas cifras cubren las {n} más recientes, desde {at}.",
    ),
    (
        "chart_desc",
        "From {from} to {to} UTC; the tallest bar is {peak} calls.",
        "De {from} a {to} UTC; la barra más alta es de {peak} llamadas.",
    ),
    ("bucket_full", "limit reached", "límite alcanzado"),
    (
        "calls_of_credential",
        "This credential's calls",
        "Las llamadas de esta credencial",
    ),
];
