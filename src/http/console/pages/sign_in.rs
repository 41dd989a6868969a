//! Signing in and out. A person pastes a token abstore issued; it is
//! verified exactly as a bearer token is (`crate::http::verify_token`), and
//! a session holding it opens (`crate::http::console::session`): the browser gets
//! only the session's random id, in an HttpOnly, SameSite=Strict cookie,
//! Secure when the request came over TLS (`--public-url` says `https`, or a
//! proxy says `X-Forwarded-Proto: https`). Attempts are rate-limited per
//! address and must come from the console's own origin.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::{Markup, html};

use crate::http::SharedState;
use crate::http::console::Console;
use crate::http::console::guard;
use crate::http::console::respond::{PageError, html_page, redirect, shell};
use crate::http::console::session;

const PAGE: &str = "sign-in";

/// `GET /console/sign-in`.
pub async fn form(State(state): State<SharedState>) -> Response {
    match super::console(&state, PAGE) {
        Ok(_) if state.access.secret.is_none() => redirect("/console/", None),
        Ok(_) => html_page(StatusCode::OK, page(None)),
        Err(refused) => refused.into_response(),
    }
}

fn page(problem: Option<&str>) -> Markup {
    shell(
        PAGE,
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            p.muted { "Paste a token this server issued (" code { "abstore token mint" } "). \
                       It is kept on the server; the browser holds only a session cookie." }
            @if let Some(problem) = problem {
                p.error data-error="401" { (problem) }
            }
            form method="post" action="/console/sign-in" data-action="sign-in" {
                label for="token" { "Token" }
                input type="password" id="token" name="token" autocomplete="off" required;
                p { button type="submit" { "Sign in" } }
            }
        },
    )
}

/// `POST /console/sign-in`.
pub async fn sign_in(
    State(state): State<SharedState>,
    request: axum::extract::Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    match run_sign_in(&state, peer, &parts.headers, body).await {
        Ok(response) | Err(response) => response,
    }
}

async fn run_sign_in(
    state: &SharedState,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    let console = super::console(state, PAGE).map_err(|e| e.into_response())?;
    let Some(secret) = &state.access.secret else {
        return Ok(redirect("/console/", None));
    };
    if !guard::same_origin(&console, headers) {
        return Err(PageError::forbidden(PAGE, "Cross-origin request refused.").into_response());
    }
    let address = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
    if let Err(wait) = console.sign_ins.attempt(address, Instant::now()) {
        let mut refused = PageError::new(
            PAGE,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many sign-in attempts from this address; wait and try again.",
        );
        refused.retry_after = Some(wait);
        return Err(refused.into_response());
    }
    let form = guard::read_form(PAGE, body, state.limits.max_json_body_bytes)
        .await
        .map_err(|e| e.into_response())?;
    let token = form.get("token").map(|t| t.trim()).unwrap_or_default();
    if crate::http::verify_token(state, secret, token).is_err() {
        return Err(html_page(
            StatusCode::UNAUTHORIZED,
            page(Some(
                "That token does not verify on this server (or has expired or been revoked).",
            )),
        ));
    }
    let (id, _csrf) = console.sessions.open(token.to_owned());
    Ok(redirect(
        "/console/",
        Some(session::set_cookie(&id, secure(&console, headers))),
    ))
}

/// `POST /console/sign-out`: the session ends at once.
pub async fn sign_out(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let (console, viewer, _form) = super::posted(&state, &headers, body, None, PAGE).await?;
        if let Some(signed_in) = &viewer.signed_in {
            console.sessions.end(&signed_in.session_id);
        }
        Ok::<_, PageError>(redirect(
            "/console/sign-in",
            Some(session::clear_cookie(secure(&console, &headers))),
        ))
    };
    match run.await {
        Ok(response) => response,
        Err(refused) => refused.into_response(),
    }
}

/// Whether the browser reached the console over TLS.
fn secure(console: &Console, headers: &HeaderMap) -> bool {
    console
        .settings
        .public_url
        .as_ref()
        .is_some_and(|url| url.scheme() == "https")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}
