//! A minimal HTTP/1.1 server for `GET /metrics`, on std threads.
//!
//! Why not hyper: the daemon answers one URL, to one scraper, every few seconds; a
//! hand-written responder of ~150 lines with its tests costs less than the hyper stack
//! and runs the same beside the tokio daemon and the thread-based drain agent.
//!
//! - One listener thread accepts; each connection is served on a thread of its own, at
//!   most [`MAX_CONNECTIONS`] at once (more are closed at once with 503).
//! - The request head is read up to [`MAX_HEAD`] bytes with a read timeout of
//!   [`TIMEOUT`]; a longer or slower head is answered 431 / dropped.
//! - `GET` or `HEAD /metrics` (a query string is ignored): 200 with the text format;
//!   `GET /`: 200 with a line pointing at /metrics; another path: 404; another method:
//!   405. Every answer is `Connection: close` with a `Content-Length`.
//! - The render function runs inside `catch_unwind`: its error or panic is a 500 with
//!   a one-line reason, never the end of the daemon.
//! - Dropping the [`Server`] stops the listener (a self-connection wakes `accept`) and
//!   joins it.

use crate::{MetricsError, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The function that renders the exposition on each scrape.
pub type Render = Arc<dyn Fn() -> Result<String> + Send + Sync>;

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest request head read, bytes.
pub const MAX_HEAD: usize = 8192;
/// Read and write timeout of a connection.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running metrics server; stops when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Listen on `addr` (`host:port`; port 0 picks a free one) and serve `render`.
    pub fn start(addr: &str, render: Render) -> Result<Server> {
        let bind_err = |source| MetricsError::Bind {
            addr: addr.to_string(),
            source,
        };
        let sa = addr
            .to_socket_addrs()
            .map_err(bind_err)?
            .next()
            .ok_or_else(|| bind_err(std::io::Error::other("resolves to no address")))?;
        let listener = TcpListener::bind(sa).map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || accept_loop(listener, render, stop2))
            .map_err(|source| MetricsError::Io {
                what: "start the metrics thread".into(),
                source,
            })?;
        Ok(Server {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, render: Render, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut sock) = conn else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = sock.set_read_timeout(Some(TIMEOUT));
        let _ = sock.set_write_timeout(Some(TIMEOUT));
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = respond(&mut sock, 503, "text/plain", b"busy\n", false);
            continue;
        }
        let render = render.clone();
        let active2 = active.clone();
        let spawned = std::thread::Builder::new()
            .name("metrics-conn".into())
            .spawn(move || {
                serve(sock, &render);
                active2.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Read the request head (up to the blank line); the status to answer if it is too long
/// (431), cut off (400) or too slow (408; both closed without an answer).
fn read_head(sock: &mut TcpStream) -> std::result::Result<Vec<u8>, u16> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = sock.read(&mut buf).map_err(|_| 408u16)?;
        if n == 0 {
            return Err(400);
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return Err(431);
        }
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(head);
        }
    }
}

fn serve(mut sock: TcpStream, render: &Render) {
    let head = match read_head(&mut sock) {
        Ok(h) => h,
        Err(408) | Err(400) => return,
        Err(code) => {
            let _ = respond(&mut sock, code, "text/plain", b"request head too large\n", false);
            // Closing with unread bytes would reset the connection and lose the answer:
            // stop writing, then discard (a bounded amount of) what the client still sends.
            let _ = sock.shutdown(std::net::Shutdown::Write);
            let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
            let _ = std::io::copy(&mut (&mut sock).take(1 << 20), &mut std::io::sink());
            return;
        }
    };
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let _ = respond(&mut sock, 405, "text/plain", b"only GET\n", false);
        return;
    }
    match path {
        "/metrics" => {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| render()));
            let _ = match out {
                Ok(Ok(text)) => respond(&mut sock, 200, CONTENT_TYPE, text.as_bytes(), head_only),
                Ok(Err(e)) => {
                    tracing::warn!("metrics: {e}");
                    respond(
                        &mut sock,
                        500,
                        "text/plain",
                        format!("{e}\n").as_bytes(),
                        head_only,
                    )
                }
                Err(_) => respond(
                    &mut sock,
                    500,
                    "text/plain",
                    b"the metrics collector panicked\n",
                    head_only,
                ),
            };
        }
        "/" => {
            let _ = respond(
                &mut sock,
                200,
                "text/plain",
                b"ckptfs metrics: GET /metrics\n",
                head_only,
            );
        }
        _ => {
            let _ = respond(
                &mut sock,
                404,
                "text/plain",
                b"not found; GET /metrics\n",
                head_only,
            );
        }
    }
}

fn respond(
    sock: &mut TcpStream,
    code: u16,
    ctype: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if code == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    sock.write_all(out.as_bytes())?;
    if !head_only {
        sock.write_all(body)?;
    }
    sock.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn server(render: Render) -> Server {
        Server::start("127.0.0.1:0", render).unwrap()
    }

    #[test]
    fn get_metrics_answers_the_rendered_text_with_its_length() {
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let s = server(Arc::new(move || {
            let k = n2.fetch_add(1, Ordering::SeqCst);
            Ok(format!("# TYPE a gauge\na {k}\n"))
        }));
        let r = get(s.local_addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        assert!(r.contains("Content-Length: 19\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\n# TYPE a gauge\na 0\n"), "{r}");
        // Rendered again on every scrape; a query string is ignored.
        let r = get(s.local_addr(), b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(r.ends_with("a 1\n"), "{r}");
        // HEAD: the head only.
        let r = get(s.local_addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\n"), "{r}");
    }

    #[test]
    fn other_paths_methods_and_oversized_heads_are_refused() {
        let s = server(Arc::new(|| Ok(String::new())));
        assert!(get(s.local_addr(), b"GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let r = get(s.local_addr(), b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 405") && r.contains("Allow: GET, HEAD"),
            "{r}"
        );
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        big.extend_from_slice(b"\r\n\r\n");
        assert!(get(s.local_addr(), &big).starts_with("HTTP/1.1 431"));
        // A client that connects and closes without a request changes nothing.
        drop(TcpStream::connect(s.local_addr()).unwrap());
        assert!(get(s.local_addr(), b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn a_render_error_or_panic_is_a_500_and_the_server_keeps_serving() {
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let s = server(Arc::new(move || match n2.fetch_add(1, Ordering::SeqCst) {
            0 => Err(MetricsError::Collect("store gone".into())),
            1 => panic!("collector bug"),
            _ => Ok("ok 1\n".into()),
        }));
        let r = get(s.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 500") && r.ends_with("store gone\n"),
            "{r}"
        );
        let r = get(s.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 500") && r.contains("panicked"), "{r}");
        let r = get(s.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("ok 1\n"), "{r}");
    }

    #[test]
    fn a_silent_client_does_not_block_the_others_and_drop_stops_the_listener() {
        let s = server(Arc::new(|| Ok("x 1\n".into())));
        let addr = s.local_addr();
        let _silent = TcpStream::connect(addr).unwrap();
        let r = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.ends_with("x 1\n"), "{r}");
        drop(s);
        // The port is closed (or, rarely, reused by someone else; never answered by us).
        if let Ok(mut c) = TcpStream::connect(addr) {
            let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            assert!(!out.contains("x 1"), "{out}");
        }
    }

    #[test]
    fn a_bad_address_is_a_bind_error() {
        assert!(matches!(
            Server::start("not an address", Arc::new(|| Ok(String::new()))),
            Err(MetricsError::Bind { .. })
        ));
        let s = server(Arc::new(|| Ok(String::new())));
        assert!(matches!(
            Server::start(&s.local_addr().to_string(), Arc::new(|| Ok(String::new()))),
            Err(MetricsError::Bind { .. })
        ));
    }
}
