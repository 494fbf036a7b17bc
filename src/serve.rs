//! Steps shared by the gateway's own HTTP/1 listeners (the egress, the admin listener).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;

/// Read the next request's head; `false` when there is none to serve. A head that does not
/// parse (a bare CR, an obs-fold, two lengths, an HTTP/2 preface, …) gets `bad_request`'s
/// answer (made from its error) and the connection is shut: Pingora's own HTTP app would close
/// it without a word, or (`ServeHttp`) write the request's bytes at ERROR — a token among them.
/// The error's context holds those bytes: it is never logged here.
pub async fn read_head(
    session: &mut ServerSession,
    bad_request: impl FnOnce(&pingora::Error) -> Option<(ResponseHeader, Bytes)>,
) -> bool {
    match session.read_request().await {
        Ok(read) => read,
        Err(e) if *e.etype() == pingora::ErrorType::InvalidHTTPHeader => {
            if let Some((head, body)) = bad_request(&e) {
                // Writes the answer and turns keep-alive off.
                let _ = session.write_error_response(head, body).await;
            }
            session.shutdown().await;
            false
        }
        Err(_) => false,
    }
}
