//! The words of the OAuth pages: the front door a person sees while an application signs
//! them in (sign-in, consent, failures; `fd_…`), and the operator's Grants page (the
//! grants and the registered applications). Merged into the console's one table by
//! [`super::texts`], keys unique across both.

/// `(key, English, Spanish)`.
pub(super) const TEXTS: &[(&str, &str, &str)] = &[
    // The front door.
    ("fd_sign_in", "Sign in", "Iniciar sesión"),
    ("fd_consent", "Allow access?", "¿Permitir el acceso?"),
    ("fd_error", "Sign-in stopped", "Inicio de sesión detenido"),
    (
        "fd_sign_in_for",
        "An application wants to use tollgate as you:",
        "Una aplicación quiere usar tollgate en su nombre:",
    ),
    ("fd_key", "Your personal key", "Su clave personal"),
    (
        "fd_key_help",
        "The API key your operator gave you (tg_live_…). It proves who you are here; the application never sees it.",
        "La clave de API que le dio su operador (tg_live_…). Demuestra quién es usted aquí; la aplicación nunca la ve.",
    ),
    (
        "fd_sign_in_wrong",
        "That key is not valid. Check it and try again.",
        "Esa clave no es válida. Revísela e inténtelo de nuevo.",
    ),
    ("fd_continue", "Continue", "Continuar"),
    (
        "fd_consent_asks",
        "asks to use tollgate as you, with these permissions.",
        "pide usar tollgate en su nombre, con estos permisos.",
    ),
    ("fd_person", "Signed in as", "Sesión de"),
    (
        "fd_client_id",
        "Application id",
        "Identificador de la aplicación",
    ),
    ("fd_redirect_host", "You will be sent back to", "Volverá a"),
    (
        "fd_loopback_warning",
        "This application receives its answer on this computer only. Allow it only if you started it yourself just now.",
        "Esta aplicación recibe la respuesta solo en este ordenador. Permítalo solo si acaba de iniciarla usted.",
    ),
    ("fd_granted", "It will be allowed to", "Podrá"),
    (
        "fd_not_held",
        "It also asked for, but you do not hold",
        "También pidió, pero usted no tiene",
    ),
    ("fd_allow", "Allow", "Permitir"),
    ("fd_deny", "Deny", "Denegar"),
    (
        "fd_error_invalid_request",
        "This sign-in cannot go on.",
        "Este inicio de sesión no puede continuar.",
    ),
    (
        "fd_error_invalid_client",
        "This application is not known here.",
        "Esta aplicación no es conocida aquí.",
    ),
    (
        "fd_error_access_denied",
        "This request was refused.",
        "Esta solicitud fue rechazada.",
    ),
    (
        "fd_error_temporarily_unavailable",
        "The server cannot complete the sign-in right now.",
        "El servidor no puede completar el inicio de sesión ahora.",
    ),
    // The Grants page.
    ("grants", "Grants", "Autorizaciones"),
    (
        "grants_help",
        "Each grant is a person's consent to an application that signed them in through the OAuth front door: its tokens act as that person, with the scopes below and the person's own limits, blocks and audit trail. Revoking a grant refuses its tokens from their next call, on every node; the application must ask the person again.",
        "Cada autorización es el consentimiento de una persona a una aplicación que la hizo entrar por la puerta OAuth: sus tokens actúan como esa persona, con los ámbitos indicados y los límites, bloqueos y registro de auditoría de la persona. Revocar una autorización rechaza sus tokens desde su siguiente llamada, en todos los nodos; la aplicación debe volver a pedírsela a la persona.",
    ),
    (
        "front_door_off",
        "The OAuth front door is off ([oauth_server] enabled = false): no application can sign people in now. The grants below were given while it was on.",
        "La puerta OAuth está desactivada ([oauth_server] enabled = false): ahora ninguna aplicación puede hacer entrar a nadie. Las autorizaciones siguientes se dieron mientras estaba activada.",
    ),
    ("person", "Person", "Persona"),
    ("application", "Application", "Aplicación"),
    ("created", "Created (UTC)", "Creada (UTC)"),
    ("grant_standing", "standing", "vigente"),
    ("grant_revoked_since", "revoked since", "revocada desde"),
    (
        "no_grants",
        "No person has allowed an application yet.",
        "Todavía ninguna persona ha autorizado una aplicación.",
    ),
    (
        "confirm_revoke_grant",
        "Revoke the grant of {person} to {client}? Its tokens are refused from their next call, on every node, and the application must ask {person} again. This cannot be undone.",
        "¿Revocar la autorización de {person} a {client}? Sus tokens se rechazan desde su siguiente llamada, en todos los nodos, y la aplicación debe volver a pedírsela a {person}. No se puede deshacer.",
    ),
    (
        "registered_clients",
        "Registered applications",
        "Aplicaciones registradas",
    ),
    (
        "registered_help",
        "Applications that registered themselves at /oauth/register. One known by the URL of its metadata document is not registered, and is not listed here. Deleting a registration revokes every grant to it; the application must register again.",
        "Aplicaciones que se registraron solas en /oauth/register. Una conocida por la URL de su documento de metadatos no está registrada y no aparece aquí. Eliminar un registro revoca todas sus autorizaciones; la aplicación debe registrarse de nuevo.",
    ),
    ("redirect_uris", "Redirect URIs", "URI de retorno"),
    ("auth_method", "Authentication", "Autenticación"),
    (
        "no_registered_clients",
        "No application has registered itself.",
        "Ninguna aplicación se ha registrado.",
    ),
    ("delete", "Delete", "Eliminar"),
    (
        "confirm_delete_client",
        "Delete the registration of {client} ({id})? Every grant to it is revoked and its tokens are refused from their next call, on every node; it must register again.",
        "¿Eliminar el registro de {client} ({id})? Se revocan todas sus autorizaciones y sus tokens se rechazan desde su siguiente llamada, en todos los nodos; deberá registrarse de nuevo.",
    ),
];
