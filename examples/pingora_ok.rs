//! The bare-Pingora baseline of `bench/run.sh`: the framework the gateway is built on, with the
//! same proxy service, thread count and allocator, answering every request 200 itself after
//! reading its body — what the ingress costs before it verifies, records or delivers anything.
//!
//!   cargo run --release --example pingora_ok -- 127.0.0.1:8099

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Ok200;

#[async_trait]
impl ProxyHttp for Ok200 {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _: &mut Session, _: &mut ()) -> Result<Box<HttpPeer>> {
        Err(Error::new(ErrorType::InternalError))
    }

    async fn request_filter(&self, session: &mut Session, _: &mut ()) -> Result<bool> {
        while session.read_request_body().await?.is_some() {}
        let mut head = ResponseHeader::build(200, Some(1))?;
        head.insert_header("Content-Length", "0")?;
        session.write_response_header(Box::new(head), true).await?;
        Ok(true)
    }
}

fn main() {
    let listen = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8099".into());
    let conf = ServerConf { threads: 2, ..ServerConf::default() };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(&server.configuration, Ok200);
    service.add_tcp(&listen);
    server.add_service(service);
    eprintln!("listening on {listen}");
    server.run_forever();
}
