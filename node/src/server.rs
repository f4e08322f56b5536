//! The client-protocol listener: one task per connection, handshake, then
//! each request is checked and handed to the event loop, and its answer
//! written back. A bad frame gets an error reply and closes that
//! connection only.

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use zorilla_sandbox::Sandbox;

use crate::node::Command;
use crate::protocol::frame::DEFAULT_MAX_FRAME;
use crate::protocol::{
    Connection, ConnectionError, ErrorKind, Hello, PROTOCOL_VERSION, Request, Response, Welcome,
};

/// Accepts clients until the listener fails or the node stops.
pub(crate) async fn serve(
    listener: TcpListener,
    commands: mpsc::Sender<Command>,
    sandbox: Sandbox,
    peer: String,
) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let commands = commands.clone();
        let sandbox = sandbox.clone();
        let peer = peer.clone();
        tokio::spawn(async move {
            let mut conn = Connection::new(stream, DEFAULT_MAX_FRAME);
            if let Err(e) = handle(&mut conn, commands, sandbox, peer).await {
                tracing::debug!(%addr, "client connection ended: {e}");
                let _ = conn
                    .write(&Response::error(ErrorKind::BadRequest, e.to_string()))
                    .await;
            }
        });
    }
}

async fn handle(
    conn: &mut Connection,
    commands: mpsc::Sender<Command>,
    sandbox: Sandbox,
    peer: String,
) -> Result<(), ConnectionError> {
    let Some(hello) = conn.read::<Hello>().await? else {
        return Ok(());
    };
    if hello.version != PROTOCOL_VERSION {
        let message = format!(
            "client speaks protocol version {}, this node speaks {PROTOCOL_VERSION}",
            hello.version
        );
        conn.write(&Response::error(ErrorKind::Version, message))
            .await?;
        return Ok(());
    }
    conn.write(&Response::Welcome(Welcome {
        version: PROTOCOL_VERSION,
        peer,
    }))
    .await?;
    while let Some(request) = conn.read::<Request>().await? {
        // A broken module is refused here, before the job is accepted.
        if let Request::Submit { module, .. } = &request {
            let sandbox = sandbox.clone();
            let module = module.clone();
            let checked = tokio::task::spawn_blocking(move || sandbox.load(&module).map(|_| ()))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(e) = checked {
                let message = format!("module refused: {e}");
                conn.write(&Response::error(ErrorKind::BadRequest, message))
                    .await?;
                continue;
            }
        }
        let (reply, rx) = oneshot::channel();
        let response = match commands.send(Command { request, reply }).await {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Response::error(ErrorKind::Internal, "node is shutting down")),
            Err(_) => Response::error(ErrorKind::Internal, "node is shutting down"),
        };
        conn.write(&response).await?;
    }
    Ok(())
}
