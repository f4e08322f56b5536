//! An async client of a node's client protocol (see [`crate::protocol`]),
//! used by the tests and meant for the `zorilla` command-line tool.
//!
//! ```no_run
//! # async fn f() -> Result<(), zorilla_node::client::ClientError> {
//! use zorilla_node::client::Client;
//! use zorilla_node::protocol::JobRequest;
//! let mut client = Client::connect("127.0.0.1:4100").await?;
//! let module = std::fs::read("examples/wasm/hello.wasm").unwrap();
//! let job = client.submit(JobRequest::default(), module, vec![]).await?;
//! let status = client.status(job).await?;
//! println!("{:?}: {}", status.phase, status.reason);
//! # Ok(()) }
//! ```

use tokio::net::{TcpStream, ToSocketAddrs};

use crate::protocol::frame::DEFAULT_MAX_FRAME;
use crate::protocol::{
    Connection, ConnectionError, ErrorKind, Hello, JobRequest, JobStatus, LogChunk, LogPage,
    MAX_OUTPUT_BLOCK_BYTES, NamedFile, NodeInfo, OutputData, OutputEntry, PROTOCOL_VERSION,
    PeerEntry, Request, Response, Welcome,
};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// The node closed the connection.
    #[error("the node closed the connection")]
    Closed,
    /// The node answered with an error.
    #[error("{kind:?}: {message}")]
    Node {
        /// What kind of error.
        kind: ErrorKind,
        /// What the node said.
        message: String,
    },
    /// The node answered with something else than expected.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

/// A connection to a node, after the handshake.
#[derive(Debug)]
pub struct Client {
    conn: Connection,
    welcome: Welcome,
}

impl Client {
    /// Connects to a node's client address and shakes hands (without a
    /// token: enough for a node that has none).
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Self::connect_with(addr, None, "zorilla-node client").await
    }

    /// Connects presenting `token`, naming the client `name` in the node's
    /// logs.
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        token: Option<&str>,
        name: &str,
    ) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(ConnectionError::from)?;
        Self::over(stream, token, name).await
    }

    /// Shakes hands over `stream`, already connected to a node's client
    /// port by the caller (the tests connect from inside a network
    /// namespace), presenting `token`.
    pub async fn over(
        stream: TcpStream,
        token: Option<&str>,
        name: &str,
    ) -> Result<Client, ClientError> {
        stream.set_nodelay(true).map_err(ConnectionError::from)?;
        let mut conn = Connection::new(stream, DEFAULT_MAX_FRAME);
        conn.write(&Hello {
            version: PROTOCOL_VERSION,
            client: format!("{name} {}", env!("CARGO_PKG_VERSION")),
            token: token.map(str::to_owned),
        })
        .await?;
        match conn.read::<Response>().await? {
            Some(Response::Welcome(welcome)) => Ok(Client { conn, welcome }),
            other => Err(unexpected(other)),
        }
    }

    /// What the node said in the handshake.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Sends one request and waits for its answer (errors become `Err`).
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.conn.write(request).await?;
        match self.conn.read::<Response>().await? {
            Some(Response::Error { kind, message }) => Err(ClientError::Node { kind, message }),
            Some(response) => Ok(response),
            None => Err(ClientError::Closed),
        }
    }

    /// Submits a job; returns its id.
    pub async fn submit(
        &mut self,
        job: JobRequest,
        module: Vec<u8>,
        inputs: Vec<NamedFile>,
    ) -> Result<u64, ClientError> {
        match self
            .call(&Request::Submit {
                job,
                module,
                inputs,
            })
            .await?
        {
            Response::Submitted { job } => Ok(job),
            other => Err(unexpected(Some(other))),
        }
    }

    /// The status of a job.
    pub async fn status(&mut self, job: u64) -> Result<JobStatus, ClientError> {
        match self.call(&Request::Status { job }).await? {
            Response::Status(status) => Ok(status),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Every job the node is home to.
    pub async fn list(&mut self) -> Result<Vec<JobStatus>, ClientError> {
        match self.call(&Request::List).await? {
            Response::Jobs(jobs) => Ok(jobs),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Cancels a job; returns its status after the cancel.
    pub async fn cancel(&mut self, job: u64) -> Result<JobStatus, ClientError> {
        match self.call(&Request::Cancel { job }).await? {
            Response::Status(status) => Ok(status),
            other => Err(unexpected(Some(other))),
        }
    }

    /// All the stdout and stderr collected so far.
    pub async fn logs(&mut self, job: u64) -> Result<Vec<LogChunk>, ClientError> {
        let mut all = Vec::new();
        let mut from = 0;
        loop {
            let page = self.logs_page(job, from, 0).await?;
            let done = page.ended || page.chunks.is_empty();
            all.extend(page.chunks);
            from = page.next;
            if done {
                return Ok(all);
            }
        }
    }

    /// One page of logs from chunk `from` on, waiting up to `wait_secs`
    /// for new ones if there are none yet.
    pub async fn logs_page(
        &mut self,
        job: u64,
        from: u64,
        wait_secs: u32,
    ) -> Result<LogPage, ClientError> {
        match self
            .call(&Request::Logs {
                job,
                from,
                wait_secs,
            })
            .await?
        {
            Response::Logs(page) => Ok(page),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Changes the most workers a malleable job may use.
    pub async fn resize(&mut self, job: u64, max_workers: u32) -> Result<JobStatus, ClientError> {
        match self.call(&Request::Resize { job, max_workers }).await? {
            Response::Status(status) => Ok(status),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Hands the node revocations (each as its file holds it) to keep and
    /// flood; returns how many were new to it.
    pub async fn revoke(&mut self, revocations: Vec<Vec<u8>>) -> Result<u64, ClientError> {
        let request = Request::Revoke {
            revocations: revocations
                .into_iter()
                .map(serde_bytes::ByteBuf::from)
                .collect(),
        };
        match self.call(&request).await? {
            Response::Revoked { new } => Ok(new),
            other => Err(unexpected(Some(other))),
        }
    }

    /// The peers the node knows, nearest first.
    pub async fn peers(&mut self) -> Result<Vec<PeerEntry>, ClientError> {
        match self.call(&Request::Peers).await? {
            Response::Peers(peers) => Ok(peers),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Every output file of a job collected so far (names `rank/path`
    /// and sizes), page after page.
    pub async fn outputs(&mut self, job: u64) -> Result<Vec<OutputEntry>, ClientError> {
        let mut all: Vec<OutputEntry> = Vec::new();
        loop {
            let after = all.last().map(|f| f.name.clone()).unwrap_or_default();
            let page = match self.call(&Request::Outputs { job, after }).await? {
                Response::Outputs(page) => page,
                other => return Err(unexpected(Some(other))),
            };
            let more = page.more && !page.files.is_empty();
            all.extend(page.files);
            if !more {
                return Ok(all);
            }
        }
    }

    /// Up to `len` bytes (at most [`MAX_OUTPUT_BLOCK_BYTES`]) of output
    /// file `name` from `offset`, and the file's size.
    pub async fn output_block(
        &mut self,
        job: u64,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<OutputData, ClientError> {
        let request = Request::OutputBlock {
            job,
            name: name.to_owned(),
            offset,
            len,
        };
        match self.call(&request).await? {
            Response::OutputBlock(block) => Ok(block),
            other => Err(unexpected(Some(other))),
        }
    }

    /// A whole output file, read block by block (for files that fit in
    /// memory; `zorilla fetch` streams to disk instead).
    pub async fn read_output(&mut self, job: u64, name: &str) -> Result<Vec<u8>, ClientError> {
        let mut data = Vec::new();
        loop {
            let block = self
                .output_block(job, name, data.len() as u64, MAX_OUTPUT_BLOCK_BYTES)
                .await?;
            if block.data.is_empty() {
                return Ok(data);
            }
            data.extend_from_slice(&block.data);
            if data.len() as u64 >= block.size {
                return Ok(data);
            }
        }
    }

    /// What the node is and has.
    pub async fn node_info(&mut self) -> Result<NodeInfo, ClientError> {
        match self.call(&Request::NodeInfo).await? {
            Response::NodeInfo(info) => Ok(info),
            other => Err(unexpected(Some(other))),
        }
    }
}

fn unexpected(response: Option<Response>) -> ClientError {
    match response {
        None => ClientError::Closed,
        Some(Response::Error { kind, message }) => ClientError::Node { kind, message },
        Some(other) => ClientError::Unexpected(format!("{other:?}")),
    }
}
