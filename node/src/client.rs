//! An async client of a node's client protocol (see [`crate::protocol`]),
//! used by the `zorilla` command-line tool, the tests and the benchmarks.
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

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::owner::UserKey;

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

/// A connection to a node, after the handshake, acting as one user: it
/// signs its submissions, and proves to a job's home (through whichever
/// node it is connected to) that it owns the job it asks about (see
/// [`crate::owner`]). Unless told otherwise ([`Client::as_user`]), the user
/// is one made for the process ([`UserKey::ephemeral`]).
#[derive(Debug)]
pub struct Client {
    conn: Connection,
    welcome: Welcome,
    user: UserKey,
    /// Per job: the nonce its home gave, and the last sequence number used.
    sessions: HashMap<u64, (Vec<u8>, u64)>,
}

/// The most jobs a client keeps a home's nonce for.
const MAX_CLIENT_SESSIONS: usize = 1024;

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
            Some(Response::Welcome(welcome)) => Ok(Client {
                conn,
                welcome,
                user: UserKey::ephemeral(),
                sessions: HashMap::new(),
            }),
            other => Err(unexpected(other)),
        }
    }

    /// The same connection, acting as `user` from now on.
    pub fn as_user(mut self, user: UserKey) -> Client {
        self.user = user;
        self.sessions.clear();
        self
    }

    /// The user this client acts as.
    pub fn user(&self) -> &UserKey {
        &self.user
    }

    /// What the node said in the handshake.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Sends one request and waits for its answer (errors become `Err`).
    /// A request that only a job's owner makes goes with this user's proof
    /// (a nonce from the job's home is asked for first, and again once if
    /// the home no longer knows it).
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        let job = crate::forward::job_of(request);
        let Some(job) = job.filter(|_| crate::validate::owners_request(request).is_ok()) else {
            return self.send(request).await;
        };
        for attempt in 0..2 {
            let (nonce, seq) = self.session(job).await?;
            let proof = self.user.prove(&nonce, seq, request);
            let owned = Request::Owner {
                proof,
                request: Box::new(request.clone()),
            };
            match self.send(&owned).await {
                Err(ClientError::Node {
                    kind: ErrorKind::Stale,
                    ..
                }) if attempt == 0 => {
                    self.sessions.remove(&job);
                }
                other => return other,
            }
        }
        unreachable!("the second attempt returns")
    }

    /// The nonce of `job`'s home and the next sequence number to use with
    /// it, asked for if this client has none.
    async fn session(&mut self, job: u64) -> Result<(Vec<u8>, u64), ClientError> {
        if let Some((nonce, seq)) = self.sessions.get_mut(&job) {
            *seq += 1;
            return Ok((nonce.clone(), *seq));
        }
        let nonce = match self.send(&Request::Challenge { job }).await? {
            Response::Challenge { nonce } => nonce,
            other => return Err(unexpected(Some(other))),
        };
        if self.sessions.len() >= MAX_CLIENT_SESSIONS {
            self.sessions.clear();
        }
        self.sessions.insert(job, (nonce.clone(), 0));
        Ok((nonce, 0))
    }

    /// Sends one request as it is and waits for its answer.
    async fn send(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.conn.write(request).await?;
        match self.conn.read::<Response>().await? {
            Some(Response::Error { kind, message }) => Err(ClientError::Node { kind, message }),
            Some(response) => Ok(response),
            None => Err(ClientError::Closed),
        }
    }

    /// Submits a job, signed by this client's user, whose job it is;
    /// returns its id.
    pub async fn submit(
        &mut self,
        job: JobRequest,
        module: Vec<u8>,
        inputs: Vec<NamedFile>,
    ) -> Result<u64, ClientError> {
        let hash = |data: &[u8]| hex::encode(Sha256::digest(data));
        let hashes: Vec<(String, String)> = inputs
            .iter()
            .map(|f| (f.name.clone(), hash(&f.data)))
            .collect();
        let hashes: Vec<(&str, &str)> = hashes
            .iter()
            .map(|(n, h)| (n.as_str(), h.as_str()))
            .collect();
        let message =
            crate::owner::submit_message(&self.welcome.nonce, &job, &hash(&module), &hashes);
        let owner = crate::protocol::Signed {
            user: self.user.id().to_string(),
            signature: self.user.sign(&message),
        };
        match self
            .call(&Request::Submit {
                job,
                module,
                inputs,
                owner: Some(owner),
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
