use super::*;

const ID_A: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const ID_B: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    h
}

fn viewer(role: Role) -> Viewer {
    Viewer { role, csrf: session_csrf(ID_A), session: Some(session_key("{sg:ui}:s:", ID_A)) }
}

/// A form sent from the gateway's own page at `gw.internal:9090`.
fn own_form() -> HeaderMap {
    headers(&[("host", "gw.internal:9090"), ("origin", "https://gw.internal:9090")])
}

/// The session id of a request with these `Cookie` headers.
fn id_in(cookies: &[&str]) -> Option<String> {
    let pairs: Vec<(&str, &str)> = cookies.iter().map(|c| ("cookie", *c)).collect();
    session_id(&headers(&pairs)).map(str::to_string)
}

#[test]
fn the_session_cookie_among_others() {
    let ours = format!("slackgate_ui={ID_A}");
    assert_eq!(id_in(&[&ours]).as_deref(), Some(ID_A));
    assert_eq!(id_in(&[&format!("a=1; {ours}; b=2")]).as_deref(), Some(ID_A));
    assert_eq!(id_in(&[&format!("a=1;{ours}")]).as_deref(), Some(ID_A));
    // In a second Cookie header (HTTP/2 splits them), after malformed pairs and values.
    let later = format!("slackgate_ui={ID_B}");
    assert_eq!(id_in(&["junk; =; a", "slackgate_ui=short; slackgate_ui=", &later]).as_deref(), Some(ID_B));
    assert_eq!(id_in(&[&format!("slackgate_ui=nothex; {ours}")]).as_deref(), Some(ID_A));
    // Not ours: other names, upper-case or quoted ids, too long, none at all.
    for bad in [
        format!("slackgate_ui_old={ID_A}"),
        format!("Slackgate_ui={ID_A}"),
        format!("slackgate_ui={}", ID_A.to_uppercase()),
        format!("slackgate_ui=\"{ID_A}\""),
        format!("{ours}0"),
        String::new(),
    ] {
        assert_eq!(id_in(&[&bad]), None, "{bad}");
    }
    assert_eq!(id_in(&[]), None);
}

#[test]
fn the_cookie_is_http_only_strict_and_scoped_to_the_pages() {
    let c = set_cookie(ID_A, Duration::from_secs(12 * 3600), false);
    assert_eq!(c, format!("slackgate_ui={ID_A}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=43200"));
    let c = set_cookie(ID_A, Duration::from_secs(60), true);
    assert!(c.ends_with("; Max-Age=60; Secure"), "{c}");
    // The one that clears it names no id.
    assert_eq!(
        set_cookie("", Duration::ZERO, true),
        "slackgate_ui=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0; Secure"
    );
}

#[test]
fn a_session_is_stored_under_the_hash_of_its_id() {
    let key = session_key("{sg:ui}:s:", ID_A);
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(ID_A.as_bytes()));
    assert_eq!(key, format!("{{sg:ui}}:s:{hash}"));
    assert!(!key.contains(ID_A));
    assert_ne!(session_key("{sg:ui}:s:", ID_B), key);
}

#[test]
fn the_csrf_token_is_stable_per_session_and_differs_between_them() {
    assert_eq!(session_csrf(ID_A), session_csrf(ID_A));
    assert_ne!(session_csrf(ID_A), session_csrf(ID_B));
    assert_eq!(session_csrf(ID_A).len(), 64);
    assert!(!session_csrf(ID_A).contains(ID_A));
    // Not the id's hash either (that is the stored key, which Redis readers see).
    assert!(!session_key("", ID_A).contains(&session_csrf(ID_A)));
    // The open viewer's depends on the process secret.
    assert_ne!(hmac_hex(&[1; 32], OPEN_CSRF), hmac_hex(&[2; 32], OPEN_CSRF));
    assert_ne!(hmac_hex(ID_A.as_bytes(), OPEN_CSRF), session_csrf(ID_A));
}

#[test]
fn an_admin_form_from_the_own_page_with_its_token_writes() {
    let csrf = session_csrf(ID_A);
    assert_eq!(check_write(&Method::POST, &own_form(), &viewer(Role::Admin), Some(&csrf)), Ok(()));
    // Plain http, and a Host written in capitals.
    let h = headers(&[("host", "GW.internal:9090"), ("origin", "http://gw.internal:9090")]);
    assert_eq!(check_write(&Method::POST, &h, &viewer(Role::Admin), Some(&csrf)), Ok(()));
    // Any role may send a form that changes nothing of the gateway's (logging out).
    assert_eq!(check_form(&Method::POST, &own_form(), &viewer(Role::Read), Some(&csrf)), Ok(()));
}

#[test]
fn every_refusal_of_a_write() {
    let csrf = session_csrf(ID_A);
    let admin = viewer(Role::Admin);
    let write = check_write;
    for method in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE] {
        assert_eq!(write(&method, &own_form(), &admin, Some(&csrf)), Err(WriteRefused::Method), "{method}");
    }
    assert_eq!(write(&Method::POST, &own_form(), &viewer(Role::Read), Some(&csrf)), Err(WriteRefused::ReadOnly));
    let no_origin = headers(&[("host", "gw.internal:9090")]);
    assert_eq!(write(&Method::POST, &no_origin, &admin, Some(&csrf)), Err(WriteRefused::NoOrigin));
    for (host, origin) in [
        ("gw.internal:9090", "https://evil.example"),
        ("gw.internal:9090", "https://gw.internal"),
        ("gw.internal:9090", "https://gw.internal:9091"),
        ("gw.internal:9090", "https://gw.internal:9090.evil.example"),
        ("gw.internal:9090", "ftp://gw.internal:9090"),
        ("gw.internal:9090", "gw.internal:9090"),
        ("gw.internal:9090", "null"),
        ("", "http://"),
    ] {
        let h = headers(&[("host", host), ("origin", origin)]);
        assert_eq!(write(&Method::POST, &h, &admin, Some(&csrf)), Err(WriteRefused::CrossOrigin), "{origin}");
    }
    let no_host = headers(&[("origin", "https://gw.internal:9090")]);
    assert_eq!(write(&Method::POST, &no_host, &admin, Some(&csrf)), Err(WriteRefused::CrossOrigin));
    let other = session_csrf(ID_B);
    for bad in [None, Some(""), Some(other.as_str()), Some(&csrf[..63]), Some(ID_A)] {
        assert_eq!(write(&Method::POST, &own_form(), &admin, bad), Err(WriteRefused::Csrf), "{bad:?}");
    }
    // Statuses and words a person reads.
    assert_eq!(WriteRefused::Method.status(), StatusCode::METHOD_NOT_ALLOWED);
    for r in [WriteRefused::ReadOnly, WriteRefused::NoOrigin, WriteRefused::CrossOrigin, WriteRefused::Csrf] {
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{r:?}");
    }
    assert!(WriteRefused::ReadOnly.to_string().contains("can look but not act"));
}

#[test]
fn a_session_proves_its_token_without_holding_it() {
    let (old, new) = (Secret::new("the-admin-token-0123456789"), Secret::new("the-admin-token-9876543210"));
    let proof = session_proof(&old, ID_A);
    assert_eq!(proof, session_proof(&old, ID_A), "every replica with the token derives the same");
    assert_ne!(proof, session_proof(&new, ID_A), "another token, another proof");
    assert_ne!(proof, session_proof(&old, ID_B), "another session, another proof");
    assert_eq!(proof.len(), 64);
    assert!(!proof.contains("the-admin-token") && !proof.contains(ID_A));
    assert_ne!(proof, session_csrf(ID_A));
    // Stored as `<role>:<proof>`; a value without a proof (stored before proofs) is none.
    let stored = sessions::value(Role::Read, &proof);
    assert_eq!(sessions::parse(&stored), Some((Role::Read, proof.as_str())));
    for bad in ["read", "admin", "admin:", "root:abc", ""] {
        assert_eq!(sessions::parse(bad), None, "{bad}");
    }
    assert_eq!(LoginRefused::Throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(LoginRefused::WrongToken.status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn roles_round_trip_through_their_labels() {
    for role in [Role::Read, Role::Admin] {
        assert_eq!(Role::from_label(role.as_label()), Some(role));
    }
    assert_eq!(Role::from_label("Admin"), None);
    assert_eq!(Role::from_label(""), None);
    assert!(viewer(Role::Read).has_session());
}
