use super::*;

// ---------------------------------------------------------------- secrets

#[test]
fn literal_secret_is_refused_without_echoing_it() {
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"literal-hunter2\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let err = load_err(text);
    assert_err(&err, "app[0].signing_secret");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn unset_env_var_is_named() {
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_SURELY_NOT_SET_7f3a}\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let err = load_err(text);
    assert_err(&err, "app[0].signing_secret");
    assert!(err.message.contains("SG_CFG_SURELY_NOT_SET_7f3a"), "{err}");
}

#[test]
fn empty_secret_is_refused() {
    set_env("SG_CFG_EMPTY_SECRET", "");
    let text =
        "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_EMPTY_SECRET}\"\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn missing_secret_is_refused() {
    let text = "[[app]]\nname = \"a\"\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn secret_list_for_rotation() {
    set_env("SG_CFG_ROT_NEW", "new-secret");
    set_env("SG_CFG_ROT_OLD", "old-secret");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = [\"${SG_CFG_ROT_NEW}\", \"${SG_CFG_ROT_OLD}\"]\nupstream = \"http://127.0.0.1:8000\"\n";
    let c = load(text).unwrap();
    let secrets: Vec<&[u8]> = c.apps[0].secrets.iter().map(Secret::expose).collect();
    assert_eq!(secrets, [&b"new-secret"[..], b"old-secret"]);
}

#[test]
fn secret_list_errors_name_the_entry() {
    set_env("SG_CFG_ROT_ERR", "x");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = [\"${SG_CFG_ROT_ERR}\", \"literal\"]\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret[1]");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = []\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn signing_secret_file_one_per_line() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, b"  first-secret  \n\nsecond-secret\r\n").unwrap();
    let path = file.path().display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{path}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    let c = load(&text).unwrap();
    let secrets: Vec<&[u8]> = c.apps[0].secrets.iter().map(Secret::expose).collect();
    assert_eq!(secrets, [&b"first-secret"[..], b"second-secret"]);
}

#[test]
fn signing_secret_file_is_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("slack.secret"), "relative-secret\n").unwrap();
    let text = "[[app]]\nname = \"a\"\nsigning_secret_file = \"slack.secret\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let c = Config::from_toml(text, &dir.path().join("gateway.toml"), &Overrides::default()).unwrap();
    assert_eq!(c.apps[0].secrets[0].expose(), b"relative-secret");
}

#[test]
fn signing_secret_file_missing_or_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope").display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{missing}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    assert_err(&load_err(&text), "app[0].signing_secret_file");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n  \n").unwrap();
    let empty = empty.display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{empty}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    assert_err(&load_err(&text), "app[0].signing_secret");
}

#[test]
fn secret_and_secret_file_together_are_refused() {
    let text = app("a", "SG_CFG_BOTH", "signing_secret_file = \"/run/secrets/slack\"");
    assert_err(&load_err(&text), "app[0].signing_secret");
}

#[test]
fn secret_debug_is_redacted() {
    let s = Secret::new("xoxb-very-secret");
    let shown = format!("{s:?}");
    assert!(!shown.contains("very-secret"), "{shown}");
    assert_eq!(s.expose(), b"xoxb-very-secret");

    set_env("SG_CFG_DEBUG_SECRET", "the-real-signing-secret");
    let c = load(
        "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_DEBUG_SECRET}\"\nupstream = \"http://127.0.0.1:8000\"\n",
    )
    .unwrap();
    let shown = format!("{c:?} {c:#?}");
    assert!(!shown.contains("the-real-signing-secret"));
}
