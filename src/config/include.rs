//! `include = ["apps.d/*.toml"]`: one app per file, so the team that owns a bot owns its file.

use std::path::{Path, PathBuf};

use super::file::AppSection;
use super::{AppConfig, ConfigError, EgressConfig, Validator};

/// One included app file: the keys of one `[[app]]`, at the top level.
pub fn app_file(path: &Path, secrets_optional: bool, egress: &EgressConfig) -> Result<AppConfig, ConfigError> {
    let v = Validator { file: path.display().to_string(), base: path.parent(), secrets_optional };
    let text = std::fs::read_to_string(path).map_err(|e| v.err("(file)", format!("cannot read: {e}")))?;
    let raw: AppSection = toml::from_str(&text).map_err(|e| v.err("(toml)", e.to_string()))?;
    v.app("", &raw, egress)
}

/// The files an `include` pattern names, sorted; `*` and `?` in the file name only.
pub fn glob(base: Option<&Path>, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let full = match base {
        Some(b) => b.join(pattern),
        None => PathBuf::from(pattern),
    };
    let dir = full.parent().ok_or("no directory")?.to_path_buf();
    let name = full.file_name().and_then(|n| n.to_str()).ok_or("no file name")?.to_string();
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(format!("`{pattern}`: wildcards only in the file name"));
    }
    if !name.contains(['*', '?']) {
        return Ok(vec![full]);
    }
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| wildcard(&name, n)))
        .collect();
    files.sort();
    Ok(files)
}

/// `*` matches any run of characters, `?` one character.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards() {
        assert!(wildcard("*.toml", "helpdesk.toml"));
        assert!(!wildcard("*.toml", "helpdesk.toml.bak"));
        assert!(!wildcard("*.toml", "README.md"));
        assert!(wildcard("app-?.toml", "app-1.toml"));
        assert!(!wildcard("app-?.toml", "app-10.toml"));
        assert!(wildcard("*-*.toml", "a-b-c.toml"));
        assert!(wildcard("*", ""));
    }
}
