//! A test certificate authority and a `localhost` certificate it signed, so a local https
//! listener can stand in for Slack's hooks host. The gateway trusts the authority through
//! `SSL_CERT_FILE` (read by the system-roots loader), never through a switch in its code.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tokio_rustls::rustls;

pub struct TestCa {
    /// The authority's certificate, PEM: give it to the gateway as `SSL_CERT_FILE`.
    pub ca_file: PathBuf,
    /// The certificate for `localhost` and `127.0.0.1` and its key, PEM, for servers other
    /// than the acceptor (a TLS `redis-server`) and as a client certificate (mutual TLS).
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub acceptor: tokio_rustls::TlsAcceptor,
    _dir: tempfile::TempDir,
}

impl TestCa {
    pub fn new() -> TestCa {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names, or OpenSSL (a redis-server checking a client certificate) takes the
        // leaf for self-signed.
        ca_params.distinguished_name.push(DnType::CommonName, "slackgate test authority");
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
        let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let (cert_file, key_file) = (dir.path().join("localhost.pem"), dir.path().join("localhost.key"));
        std::fs::write(&cert_file, leaf.pem()).unwrap();
        std::fs::write(&key_file, leaf_key.serialize_pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        TestCa { ca_file, cert_file, key_file, acceptor, _dir: dir }
    }

    /// The environment the gateway needs to trust this authority.
    pub fn env(&self) -> (&'static str, String) {
        ("SSL_CERT_FILE", self.ca_file.display().to_string())
    }
}
