//! The route table (`abstore routes`, `src/http/routes.rs`) against the
//! running server: every route answers the protocols it declares and no
//! other, a protocol-2 client reaches no protocol-3 route (answered exactly
//! as a path no route takes), methods the table does not list are `404`, and
//! the identity check and token come before the unknown-route answer.

use crate::support::{self, Raw, Server};

const BOTH: &[&str] = &["--accept-client", "0.8.0/2", "--accept-client", "0.9.0/3"];
const SECRET: &str = "routes-secret-0123456789abcdef0123456789";

/// One line of `abstore routes`.
#[derive(Debug)]
struct Route {
    method: String,
    path: String,
    /// `None`: reached without identity headers (`anyone`).
    protocols: Option<Vec<String>>,
}

fn table() -> Vec<Route> {
    let printed = support::run_ok(&["routes"]);
    printed
        .lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let method = words.next().unwrap().to_owned();
            let path = words.next().unwrap().to_owned();
            let reach = words.next().unwrap();
            let protocols = match reach {
                "anyone" => None,
                "protocol" | "protocols" => Some(
                    words
                        .take_while(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
                        .map(|w| w.trim_end_matches(',').to_owned())
                        .collect(),
                ),
                other => panic!("unexpected reach {other:?} in {line:?}"),
            };
            Route {
                method,
                path,
                protocols,
            }
        })
        .collect()
}

/// The route's path with its captures filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "r1")
        .replace("{sid}", "st_1")
        .replace("{ticket}", "T-1")
        .replace("{*operation}", "get")
}

fn as_client(method: &str, target: &str, version: &str, protocol: &str) -> Raw<'static> {
    let method: &'static str = match method {
        "GET" => "GET",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "PUT" => "PUT",
        other => panic!("method {other}"),
    };
    let mut raw = Raw::new(method, target, None);
    raw.headers.clear();
    raw = raw
        .header("X-Autobuild-Version", version)
        .header("X-Autobuild-Protocol-Version", protocol);
    if method == "POST" {
        raw = raw.body("{}");
    }
    raw
}

fn is_no_route(reply: &support::Reply, method: &str, target: &str) -> bool {
    reply.status == 404 && reply.json()["error"] == format!("no route: {method} {target}")
}

#[tokio::test]
async fn every_route_answers_exactly_the_protocols_it_declares() {
    let server = Server::builder()
        .sqlite_file()
        .args(BOTH)
        .test_clock()
        .start()
        .await;
    let base = server.url().to_owned();
    let routes = table();
    assert!(routes.len() > 60, "{routes:?}");
    let mut protocol3_only = 0;
    for route in &routes {
        let target = concrete(&route.path);
        let what = format!("{} {}", route.method, route.path);
        let Some(protocols) = &route.protocols else {
            // Outside the protocol: reached without identity headers.
            let mut bare = as_client(&route.method, &target, "", "");
            bare.headers.clear();
            let reply = bare.send(&base).await.unwrap();
            assert!(
                reply.status < 500
                    && reply.status != 409
                    && !is_no_route(&reply, &route.method, &target),
                "{what}: {} {}",
                reply.status,
                reply.text()
            );
            continue;
        };
        // `POST /tickets/` names no operation: the route exists so that the
        // identity and token come first (as in Autobuild's hosted service),
        // and its handler then answers the unknown-route 404 itself.
        let names_nothing = route.path.ends_with('/');
        for (version, protocol) in [("0.8.0", "2"), ("0.9.0", "3")] {
            if names_nothing {
                break;
            }
            let reply = as_client(&route.method, &target, version, protocol)
                .send(&base)
                .await
                .unwrap();
            reply.assert_error_shape(&what);
            assert!(reply.status < 500, "{what}: {}", reply.text());
            let declared = protocols.iter().any(|p| p == protocol);
            assert_eq!(
                !is_no_route(&reply, &route.method, &target),
                declared,
                "{what} as protocol {protocol} (declared {protocols:?}): {} {}",
                reply.status,
                reply.text()
            );
        }
        if !protocols.iter().any(|p| p == "2") {
            protocol3_only += 1;
        }
        // No identity: 409 on every client route, whatever protocols it has.
        let mut bare = as_client(&route.method, &target, "0.8.0", "2");
        bare.headers.clear();
        bare.send(&base)
            .await
            .unwrap()
            .expect(409, Some("conflict"), &what);
    }
    // The protocol-3 surface: digests, state events, six ticket-asset
    // routes and conditional session appends.
    assert_eq!(protocol3_only, 9, "{routes:?}");
    // A method the table does not list is an unknown route, after the
    // identity check.
    for (method, path) in [("DELETE", "/builds/b1"), ("PUT", "/repos/r1/events")] {
        let reply = as_client(method, path, "0.8.0", "2")
            .send(&base)
            .await
            .unwrap();
        assert!(is_no_route(&reply, method, path), "{}", reply.text());
        let mut bare = as_client(method, path, "0.8.0", "2");
        bare.headers.clear();
        bare.send(&base)
            .await
            .unwrap()
            .expect(409, Some("conflict"), path);
    }
    // A path outside the machine families is 404 without identity.
    let mut raw = as_client("GET", "/nowhere", "0.8.0", "2");
    raw.headers.clear();
    let reply = raw.send(&base).await.unwrap();
    assert!(is_no_route(&reply, "GET", "/nowhere"), "{}", reply.text());
}

/// In authenticated mode a route a client's protocol does not reach is
/// authorized as the path it resembles (the repository here), then `404`:
/// a token that could not address the repository learns nothing more.
#[tokio::test]
async fn an_older_client_is_authorized_as_for_an_unknown_route() {
    let server = Server::builder()
        .sqlite_file()
        .args(BOTH)
        .secret(SECRET)
        .start()
        .await;
    let base = server.url().to_owned();
    let mint = |scope: &[&str]| {
        let mut args = vec!["token", "mint", "--secret", SECRET];
        args.extend_from_slice(scope);
        support::run_ok(&args).trim().to_owned()
    };
    let admin = mint(&["--admin"]);
    let build = mint(&["--build", "b1"]);
    let target = "/repos/r1/build-digests";
    let with = |token: &str, version, protocol| {
        as_client("GET", target, version, protocol)
            .header("Authorization", format!("Bearer {token}"))
    };
    // Protocol 2: the build token may not address repository r1 (403); the
    // admin token learns there is no such route (404); no token is 401.
    with(&build, "0.8.0", "2")
        .send(&base)
        .await
        .unwrap()
        .expect(403, Some("auth"), "build token, protocol 2");
    let reply = with(&admin, "0.8.0", "2").send(&base).await.unwrap();
    assert!(is_no_route(&reply, "GET", target), "{}", reply.text());
    as_client("GET", target, "0.8.0", "2")
        .send(&base)
        .await
        .unwrap()
        .expect(401, Some("auth"), "no token");
    // Protocol 3: the route exists.
    let reply = with(&admin, "0.9.0", "3").send(&base).await.unwrap();
    reply.expect(200, None, "admin, protocol 3");
    assert_eq!(reply.json(), serde_json::json!([]));
}
