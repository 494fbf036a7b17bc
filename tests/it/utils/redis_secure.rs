//! Locked-down test Redis servers: mutual TLS with the suite's test authority (the servers
//! also want a client certificate, `tls-auth-clients yes`, Redis' default) and an ACL login
//! (`default` off). The replication links and a cluster's bus are TLS too; replicas and
//! sentinels log in to the primary with the same user; sentinels have a password of their own.

use std::ffi::OsString;
use std::time::Duration;

use super::TestCa;

pub const USER: &str = "slackgate";
/// The variables the gateway reads its passwords from (`password = "${…}"`).
pub const PASSWORD_VAR: &str = "SG_TEST_REDIS_PASSWORD";
pub const SENTINEL_PASSWORD_VAR: &str = "SG_TEST_SENTINEL_PASSWORD";

pub struct RedisSecurity {
    pub ca: TestCa,
    pub password: String,
    pub sentinel_password: String,
}

impl Default for RedisSecurity {
    fn default() -> Self {
        Self::new()
    }
}

impl RedisSecurity {
    pub fn new() -> RedisSecurity {
        let tag = rand::random::<u64>();
        RedisSecurity { ca: TestCa::new(), password: format!("pw-{tag:x}"), sentinel_password: format!("sp-{tag:x}") }
    }

    fn tls_files(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        for (flag, file) in [
            ("--tls-cert-file", &self.ca.cert_file),
            ("--tls-key-file", &self.ca.key_file),
            ("--tls-ca-cert-file", &self.ca.ca_file),
        ] {
            args.push(flag.into());
            args.push(file.into());
        }
        args
    }

    /// `redis-server` arguments for a data node on `port`: TLS only (no plain port), the
    /// replication link and (with `cluster`) the cluster bus over TLS, one ACL user.
    pub fn node_args(&self, port: u16, cluster: bool) -> Vec<OsString> {
        let mut args: Vec<OsString> = ["--port", "0", "--tls-port"].map(OsString::from).to_vec();
        args.push(port.to_string().into());
        args.extend(self.tls_files());
        args.extend(["--tls-replication", "yes", "--tls-cluster", if cluster { "yes" } else { "no" }].map(Into::into));
        args.extend(["--user", "default", "off", "--user", USER, "on"].map(Into::into));
        args.push(format!(">{}", self.password).into());
        args.extend(["~*", "&*", "+@all", "--masteruser", USER, "--masterauth"].map(Into::into));
        args.push(self.password.clone().into());
        args
    }

    /// A sentinel's config: TLS to clients and to the data nodes, a password of its own (which
    /// the other sentinels use too), then `monitor` (the `sentinel monitor …` lines), then the
    /// data nodes' login for that master.
    pub fn sentinel_conf(&self, port: u16, master: &str, monitor: &str) -> String {
        let (cert, key, ca) = (self.ca.cert_file.display(), self.ca.key_file.display(), self.ca.ca_file.display());
        let pw = &self.sentinel_password;
        format!(
            "port 0\ntls-port {port}\ntls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
             tls-replication yes\nrequirepass {pw}\nsentinel sentinel-pass {pw}\n{monitor}\
             sentinel auth-user {master} {USER}\nsentinel auth-pass {master} {}\n",
            self.password
        )
    }

    /// `redis-cli` arguments to reach the data nodes.
    pub fn cli_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--tls".into()];
        for (flag, file) in
            [("--cacert", &self.ca.ca_file), ("--cert", &self.ca.cert_file), ("--key", &self.ca.key_file)]
        {
            args.push(flag.into());
            args.push(file.into());
        }
        args.extend(["--user", USER, "--pass", &self.password, "--no-auth-warning"].map(Into::into));
        args
    }

    /// A connection from the test itself, to a data node or (`sentinel`) a sentinel.
    pub fn connect(&self, port: u16, sentinel: bool) -> Option<redis::Connection> {
        let info = redis::IntoConnectionInfo::into_connection_info(format!("rediss://127.0.0.1:{port}/")).ok()?;
        let login = info.redis_settings().clone();
        let login = match sentinel {
            true => login.set_password(&self.sentinel_password),
            false => login.set_username(USER).set_password(&self.password),
        };
        let certs = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(&self.ca.cert_file).ok()?,
                client_key: std::fs::read(&self.ca.key_file).ok()?,
            }),
            root_cert: Some(std::fs::read(&self.ca.ca_file).ok()?),
        };
        let client = redis::Client::build_with_tls(info.set_redis_settings(login), certs).ok()?;
        client.get_connection_with_timeout(Duration::from_millis(500)).ok()
    }

    /// The `[redis]` lines for the gateway (beside the node URLs): logins from the environment,
    /// the authority and the client certificate from files.
    pub fn toml(&self, sentinel: bool) -> String {
        let mut lines = format!(
            "username = \"{USER}\"\npassword = \"${{{PASSWORD_VAR}}}\"\ntls_ca_file = \"{}\"\n\
             tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            self.ca.ca_file.display(),
            self.ca.cert_file.display(),
            self.ca.key_file.display()
        );
        if sentinel {
            lines.push_str(&format!("sentinel_password = \"${{{SENTINEL_PASSWORD_VAR}}}\"\n"));
        }
        lines
    }

    /// The environment that carries the passwords to the gateway.
    pub fn env(&self) -> Vec<(&'static str, &str)> {
        vec![(PASSWORD_VAR, self.password.as_str()), (SENTINEL_PASSWORD_VAR, self.sentinel_password.as_str())]
    }
}
