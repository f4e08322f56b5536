//! The checkpoints this node holds for workers of other nodes: each rank's
//! latest complete checkpoint as blocks named by their SHA-256 (computed
//! here, never taken from the sender), in a redb database of their own
//! (`checkpoints.redb` in the state directory) so that their bulk never
//! slows the jobs' database.
//!
//! A checkpoint arrives as blocks ([`Holder::put`]), then a manifest that
//! lists them in order ([`Holder::commit`]): only then does it replace the
//! rank's previous one, whose blocks the new one does not use are deleted
//! in the same transaction. A checkpoint the job's ranks took together
//! (with a generation: see [`zorilla_core::checkpoint::Latest`]) keeps
//! the one before it in the rank's timeline (the newest with a lower
//! generation), as the home's index does, so that a job rolling back finds
//! the generation all its ranks hold. So a rank has at most two committed
//! checkpoints and the blocks of one on its way.
//!
//! Bounded: a block is at most [`MAX_BLOCK_BYTES`], a checkpoint at most
//! [`MAX_CHECKPOINT_BYTES`] and [`MAX_BLOCKS`] blocks, a rank at most
//! [`RANK_QUOTA`] bytes (a committed checkpoint and one on its way), the
//! node that sends a rank's blocks at most [`HolderLimits::per_peer_bytes`]
//! in all its ranks, and everything held at most
//! [`HolderLimits::total_bytes`]: each is checked before a block is
//! written. A rank's checkpoints are deleted when the job's home says the
//! job ended ([`Holder::drop_job`]), or, should that word never come, once
//! nothing was written for the rank for [`HolderLimits::max_age`]
//! ([`Holder::expire`]).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::schema::unix_ms;

/// The largest block of a checkpoint: as the files' blocks
/// (`wire::files::BLOCK_BYTES`, a test keeps them equal), well under the overlay's
/// frame cap. Its own constant so that the store does not depend on the
/// wire, which depends on the store's types.
pub(crate) const MAX_BLOCK_BYTES: usize = 256 * 1024;
/// The largest checkpoint held (as the sandbox's limit).
pub(crate) const MAX_CHECKPOINT_BYTES: u64 = zorilla_sandbox::MAX_CHECKPOINT_BYTES;
/// The most blocks of one checkpoint.
pub(crate) const MAX_BLOCKS: usize = (MAX_CHECKPOINT_BYTES as usize).div_ceil(MAX_BLOCK_BYTES);
/// The most bytes held for one rank: its two committed checkpoints and
/// one on its way.
pub(crate) const RANK_QUOTA: u64 = 3 * MAX_CHECKPOINT_BYTES;

/// A block's name: the SHA-256 of its bytes.
pub(crate) type BlockHash = [u8; 32];

/// Blocks, by (job, rank, hash).
const BLOCKS: TableDefinition<'_, (u64, u32, &[u8]), &[u8]> = TableDefinition::new("blocks");
/// What is known of each rank held: [`RankRecord`] in CBOR.
const RANKS: TableDefinition<'_, (u64, u32), &[u8]> = TableDefinition::new("ranks");

/// A complete checkpoint: its number, size, and blocks in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) seq: u64,
    /// The generation the job's ranks took it at, if they took it together.
    #[serde(default)]
    pub(crate) generation: Option<u64>,
    pub(crate) size: u64,
    pub(crate) blocks: Vec<BlockHash>,
}

/// A rank held here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RankRecord {
    /// The node that sends its blocks (a peer id as text).
    owner: String,
    /// The job's home as the owner last named it: the only node whose
    /// word drops the job's checkpoints.
    home: String,
    /// The job's copies as the owner named them at its last commit: one
    /// of them becomes the job's home if the home is lost, so their
    /// tickets let a reader in too, and a replacement of the rank that
    /// names one of them as its home may write.
    #[serde(default)]
    copies: Vec<String>,
    /// When a block or manifest was last written, ms since the Unix epoch.
    touched_ms: u64,
    committed: Option<Manifest>,
    /// The one before `committed` in the rank's timeline, kept when
    /// `committed` has a generation (a lower generation).
    #[serde(default)]
    previous: Option<Manifest>,
}

impl RankRecord {
    /// Whether `peer` is the job's home or one of its copies as the
    /// rank's writer named them.
    fn named(&self, peer: &str) -> bool {
        self.home == peer || self.copies.iter().any(|c| c == peer)
    }
}

/// What a holder takes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HolderLimits {
    /// Everything held.
    pub(crate) total_bytes: u64,
    /// Everything held for the ranks one node sends.
    pub(crate) per_peer_bytes: u64,
    /// How long a rank nobody writes is kept.
    pub(crate) max_age: Duration,
}

impl Default for HolderLimits {
    /// 2 GiB in all, 1 GiB per sending node, a week unwritten.
    fn default() -> Self {
        HolderLimits {
            total_bytes: 2 << 30,
            per_peer_bytes: 1 << 30,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Why a holder refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HolderError {
    #[error("a checkpoint block of {0} bytes is larger than the {MAX_BLOCK_BYTES} bytes taken")]
    BlockTooLarge(usize),
    #[error("a checkpoint of {blocks} blocks and {size} bytes is beyond what is taken")]
    TooLarge { blocks: usize, size: u64 },
    #[error("this holder keeps at most {limit} bytes {what}; it has {used}")]
    Quota {
        what: &'static str,
        used: u64,
        limit: u64,
    },
    #[error("checkpoint {seq} is not newer than the one held ({held})")]
    Stale { seq: u64, held: u64 },
    #[error("the checkpoint's blocks are not all here, or not its size")]
    Incomplete,
    #[error("the rank's checkpoints are sent by another node")]
    NotOwner,
    #[error("checkpoint store: {0}")]
    Store(String),
}

impl From<redb::Error> for HolderError {
    fn from(e: redb::Error) -> Self {
        HolderError::Store(e.to_string())
    }
}

macro_rules! store_err {
    ($($t:ty),*) => {$(
        impl From<$t> for HolderError {
            fn from(e: $t) -> Self {
                HolderError::Store(e.to_string())
            }
        }
    )*};
}
store_err!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

/// The checkpoint holder: its database and what it holds, counted.
pub(crate) struct Holder {
    db: Database,
    limits: HolderLimits,
    /// Bytes held per rank, per owner, in all.
    per_rank: HashMap<(u64, u32), u64>,
    per_owner: HashMap<String, u64>,
    total: u64,
}

fn decode_rank(bytes: &[u8]) -> Result<RankRecord, HolderError> {
    ciborium::from_reader(bytes).map_err(|e| HolderError::Store(format!("a rank record: {e}")))
}

fn encode_rank(record: &RankRecord) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail for this plain type.
    ciborium::into_writer(record, &mut out).expect("CBOR encoding into memory");
    out
}

impl Holder {
    /// Opens (or creates) the holder's database at `path` and counts what
    /// it holds.
    pub(crate) fn open(path: &Path, limits: HolderLimits) -> Result<Holder, HolderError> {
        let db = redb::Builder::new().set_cache_size(8 << 20).create(path)?;
        let tx = db.begin_write()?;
        {
            tx.open_table(BLOCKS)?;
            tx.open_table(RANKS)?;
        }
        tx.commit()?;
        let mut holder = Holder {
            db,
            limits,
            per_rank: HashMap::new(),
            per_owner: HashMap::new(),
            total: 0,
        };
        holder.recount()?;
        Ok(holder)
    }

    fn recount(&mut self) -> Result<(), HolderError> {
        let tx = self.db.begin_read()?;
        let blocks = tx.open_table(BLOCKS)?;
        let ranks = tx.open_table(RANKS)?;
        let mut per_rank: HashMap<(u64, u32), u64> = HashMap::new();
        for entry in blocks.iter()? {
            let (key, value) = entry?;
            let (job, rank, _) = key.value();
            *per_rank.entry((job, rank)).or_default() += value.value().len() as u64;
        }
        let mut per_owner: HashMap<String, u64> = HashMap::new();
        for entry in ranks.iter()? {
            let (key, value) = entry?;
            let record = decode_rank(value.value())?;
            let bytes = per_rank.get(&key.value()).copied().unwrap_or(0);
            *per_owner.entry(record.owner).or_default() += bytes;
        }
        self.total = per_rank.values().sum();
        self.per_rank = per_rank;
        self.per_owner = per_owner;
        Ok(())
    }

    /// Bytes held in all.
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Stores a block of a checkpoint `seq` of `rank` of `job` sent by
    /// `owner` (whose job's home is `home`); returns its hash. A block held
    /// already costs nothing. A fresh worker of the rank on another node
    /// takes the rank over if it names the same home.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        &mut self,
        owner: &str,
        home: &str,
        job: u64,
        rank: u32,
        seq: u64,
        data: &[u8],
    ) -> Result<BlockHash, HolderError> {
        if data.len() > MAX_BLOCK_BYTES {
            return Err(HolderError::BlockTooLarge(data.len()));
        }
        let hash: BlockHash = Sha256::digest(data).into();
        let len = data.len() as u64;
        let mut tx = self.db.begin_write()?;
        // Blocks are made durable by the manifest's commit.
        tx.set_durability(Durability::None)?;
        let mut moved_from = None;
        {
            let mut ranks = tx.open_table(RANKS)?;
            let mut blocks = tx.open_table(BLOCKS)?;
            let record = match ranks.get((job, rank))? {
                Some(bytes) => Some(decode_rank(bytes.value())?),
                None => None,
            };
            let mut record = match record {
                Some(r) if r.owner != owner && !r.named(home) => return Err(HolderError::NotOwner),
                Some(r) => r,
                None => RankRecord {
                    owner: owner.to_owned(),
                    home: home.to_owned(),
                    copies: Vec::new(),
                    touched_ms: 0,
                    committed: None,
                    previous: None,
                },
            };
            if let Some(held) = &record.committed
                && held.seq >= seq
            {
                return Err(HolderError::Stale {
                    seq,
                    held: held.seq,
                });
            }
            let rank_bytes = self.per_rank.get(&(job, rank)).copied().unwrap_or(0);
            if record.owner != owner {
                moved_from = Some((record.owner.clone(), rank_bytes));
                record.owner = owner.to_owned();
            }
            // The job may have moved home since the rank's last write.
            record.home = home.to_owned();
            let fresh = blocks.get((job, rank, &hash[..]))?.is_none();
            if fresh {
                let owner_bytes = self.per_owner.get(owner).copied().unwrap_or(0)
                    + moved_from.as_ref().map_or(0, |(_, b)| *b);
                for (what, used, limit) in [
                    ("for a rank", rank_bytes, RANK_QUOTA),
                    (
                        "for the ranks of one node",
                        owner_bytes,
                        self.limits.per_peer_bytes,
                    ),
                    ("in all", self.total, self.limits.total_bytes),
                ] {
                    if used.saturating_add(len) > limit {
                        return Err(HolderError::Quota { what, used, limit });
                    }
                }
                blocks.insert((job, rank, &hash[..]), data)?;
            }
            record.touched_ms = unix_ms();
            ranks.insert((job, rank), &encode_rank(&record)[..])?;
            drop((ranks, blocks));
            tx.commit()?;
            if let Some((from, bytes)) = moved_from {
                self.shift_owner(&from, owner, bytes);
            }
            if fresh {
                *self.per_rank.entry((job, rank)).or_default() += len;
                *self.per_owner.entry(owner.to_owned()).or_default() += len;
                self.total += len;
            }
        }
        Ok(hash)
    }

    fn shift_owner(&mut self, from: &str, to: &str, bytes: u64) {
        if let Some(n) = self.per_owner.get_mut(from) {
            *n = n.saturating_sub(bytes);
            if *n == 0 {
                self.per_owner.remove(from);
            }
        }
        *self.per_owner.entry(to.to_owned()).or_default() += bytes;
    }

    fn forget(&mut self, owner: &str, job: u64, rank: u32, bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
        if let Some(n) = self.per_owner.get_mut(owner) {
            *n = n.saturating_sub(bytes);
            if *n == 0 {
                self.per_owner.remove(owner);
            }
        }
        if let Some(n) = self.per_rank.get_mut(&(job, rank)) {
            *n = n.saturating_sub(bytes);
            if *n == 0 {
                self.per_rank.remove(&(job, rank));
            }
        }
    }

    /// Makes `manifest` the rank's latest checkpoint if all its blocks are
    /// here and add up to its size, deleting the blocks of the rank it does
    /// not use (its previous checkpoint's, a broken-off one's) unless the
    /// previous one is kept (see the module docs).
    pub(crate) fn commit(
        &mut self,
        owner: &str,
        job: u64,
        rank: u32,
        manifest: Manifest,
        copies: Vec<String>,
    ) -> Result<(), HolderError> {
        if manifest.blocks.len() > MAX_BLOCKS || manifest.size > MAX_CHECKPOINT_BYTES {
            return Err(HolderError::TooLarge {
                blocks: manifest.blocks.len(),
                size: manifest.size,
            });
        }
        let tx = self.db.begin_write()?;
        let mut freed = 0u64;
        {
            let mut ranks = tx.open_table(RANKS)?;
            let mut blocks = tx.open_table(BLOCKS)?;
            let mut record = match ranks.get((job, rank))? {
                Some(bytes) => decode_rank(bytes.value())?,
                None => return Err(HolderError::Incomplete),
            };
            if record.owner != owner {
                return Err(HolderError::NotOwner);
            }
            if let Some(held) = &record.committed
                && held.seq >= manifest.seq
            {
                return Err(HolderError::Stale {
                    seq: manifest.seq,
                    held: held.seq,
                });
            }
            let mut size = 0u64;
            for hash in &manifest.blocks {
                match blocks.get((job, rank, &hash[..]))? {
                    Some(block) => size += block.value().len() as u64,
                    None => return Err(HolderError::Incomplete),
                }
            }
            if size != manifest.size {
                return Err(HolderError::Incomplete);
            }
            let previous = match manifest.generation {
                None => None,
                Some(g) => [record.committed.take(), record.previous.take()]
                    .into_iter()
                    .flatten()
                    .filter(|m| m.generation.is_some_and(|h| h < g))
                    .max_by_key(|m| m.seq),
            };
            let used: BTreeSet<&BlockHash> = manifest
                .blocks
                .iter()
                .chain(previous.iter().flat_map(|m| m.blocks.iter()))
                .collect();
            let mut unused = Vec::new();
            for entry in blocks.range((job, rank, &[][..])..(job, rank + 1, &[][..]))? {
                let (key, value) = entry?;
                let (_, _, hash) = key.value();
                if !used.iter().any(|h| h[..] == *hash) {
                    unused.push(hash.to_vec());
                    freed += value.value().len() as u64;
                }
            }
            for hash in unused {
                blocks.remove((job, rank, &hash[..]))?;
            }
            record.committed = Some(manifest);
            record.previous = previous;
            record.copies = copies;
            record.touched_ms = unix_ms();
            ranks.insert((job, rank), &encode_rank(&record)[..])?;
        }
        tx.commit()?;
        self.forget(owner, job, rank, freed);
        Ok(())
    }

    /// Whether `reader` may read the rank's checkpoints: the node that
    /// wrote them, the home or a copy of the job it named, or a node one
    /// of those let (`let_by` checks a leave with the key of the node it
    /// is given). A rank held nowhere here reads as nothing anyway.
    pub(crate) fn may_read(
        &self,
        job: u64,
        rank: u32,
        reader: &str,
        let_by: impl Fn(&str) -> bool,
    ) -> Result<bool, HolderError> {
        let tx = self.db.begin_read()?;
        let ranks = tx.open_table(RANKS)?;
        let Some(bytes) = ranks.get((job, rank))? else {
            return Ok(true);
        };
        let record = decode_rank(bytes.value())?;
        Ok(record.owner == reader
            || record.named(reader)
            || std::iter::once(&record.home)
                .chain(&record.copies)
                .any(|p| let_by(p)))
    }

    /// The rank's complete checkpoint `seq`, or its latest if `None`.
    pub(crate) fn manifest(
        &self,
        job: u64,
        rank: u32,
        seq: Option<u64>,
    ) -> Result<Option<Manifest>, HolderError> {
        let tx = self.db.begin_read()?;
        let ranks = tx.open_table(RANKS)?;
        let Some(bytes) = ranks.get((job, rank))? else {
            return Ok(None);
        };
        let record = decode_rank(bytes.value())?;
        Ok(match seq {
            None => record.committed,
            Some(seq) => [record.committed, record.previous]
                .into_iter()
                .flatten()
                .find(|m| m.seq == seq),
        })
    }

    /// A block of the rank's checkpoints.
    pub(crate) fn block(
        &self,
        job: u64,
        rank: u32,
        hash: &BlockHash,
    ) -> Result<Option<Vec<u8>>, HolderError> {
        let tx = self.db.begin_read()?;
        let blocks = tx.open_table(BLOCKS)?;
        Ok(blocks
            .get((job, rank, &hash[..]))?
            .map(|b| b.value().to_vec()))
    }

    /// Deletes the ranks of `job` whose home is `home` (the home's word
    /// that the job ended); returns how many ranks.
    pub(crate) fn drop_job(&mut self, home: &str, job: u64) -> Result<usize, HolderError> {
        self.remove_where(|j, record| j == job && record.home == home)
    }

    /// Deletes the ranks nothing was written for in [`HolderLimits::max_age`].
    pub(crate) fn expire(&mut self) -> Result<usize, HolderError> {
        let oldest = unix_ms().saturating_sub(self.limits.max_age.as_millis() as u64);
        self.remove_where(|_, record| record.touched_ms < oldest)
    }

    fn remove_where(
        &mut self,
        doomed: impl Fn(u64, &RankRecord) -> bool,
    ) -> Result<usize, HolderError> {
        let tx = self.db.begin_write()?;
        let mut removed = Vec::new();
        {
            let mut ranks = tx.open_table(RANKS)?;
            let mut blocks = tx.open_table(BLOCKS)?;
            let mut gone = Vec::new();
            for entry in ranks.iter()? {
                let (key, value) = entry?;
                let (job, rank) = key.value();
                let record = decode_rank(value.value())?;
                if doomed(job, &record) {
                    gone.push((job, rank, record.owner));
                }
            }
            for (job, rank, owner) in gone {
                ranks.remove((job, rank))?;
                let hashes: Vec<Vec<u8>> = blocks
                    .range((job, rank, &[][..])..(job, rank + 1, &[][..]))?
                    .map(|e| e.map(|(k, _)| k.value().2.to_vec()))
                    .collect::<Result<_, _>>()?;
                for hash in hashes {
                    blocks.remove((job, rank, &hash[..]))?;
                }
                removed.push((job, rank, owner));
            }
        }
        tx.commit()?;
        let n = removed.len();
        for (job, rank, owner) in removed {
            let bytes = self.per_rank.get(&(job, rank)).copied().unwrap_or(0);
            self.forget(&owner, job, rank, bytes);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(dir: &Path, limits: HolderLimits) -> Holder {
        Holder::open(&dir.join("checkpoints.redb"), limits).unwrap()
    }

    fn manifest(seq: u64, blocks: &[&[u8]]) -> Manifest {
        Manifest {
            seq,
            generation: None,
            size: blocks.iter().map(|b| b.len() as u64).sum(),
            blocks: blocks.iter().map(|b| Sha256::digest(b).into()).collect(),
        }
    }

    #[test]
    fn readers_are_the_writer_and_the_home_and_copies_it_named_or_those_they_let() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = holder(dir.path(), HolderLimits::default());
        let a = b"abc".as_slice();
        h.put("w", "home", 1, 0, 1, a).unwrap();
        h.commit("w", 1, 0, manifest(1, &[a]), vec!["c1".into(), "c2".into()])
            .unwrap();
        let nobody = |_: &str| false;
        for reader in ["w", "home", "c1", "c2"] {
            assert!(h.may_read(1, 0, reader, nobody).unwrap(), "{reader}");
        }
        assert!(!h.may_read(1, 0, "stranger", nobody).unwrap());
        // A ticket of a named copy (which took the job over) lets a reader
        // in; one of a node the writer never named does not.
        assert!(h.may_read(1, 0, "fresh", |g| g == "c2").unwrap());
        assert!(!h.may_read(1, 0, "fresh", |g| g == "elsewhere").unwrap());
        // The rank's replacement under that copy as the job's home writes
        // on; a node naming a home the writer never named does not.
        h.put("fresh", "c2", 1, 0, 2, b"def").unwrap();
        assert_eq!(
            h.put("x", "elsewhere", 1, 0, 3, b"ghi"),
            Err(HolderError::NotOwner)
        );
        // Only the home the writer last named drops the job.
        assert_eq!(h.drop_job("home", 1).unwrap(), 0);
        assert_eq!(h.drop_job("c2", 1).unwrap(), 1);
    }

    #[test]
    fn a_commit_keeps_the_newest_complete_checkpoint_and_frees_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = holder(dir.path(), HolderLimits::default());
        let (a, b, c) = (&[1u8; 100][..], &[2u8; 50][..], &[3u8; 10][..]);
        h.put("w", "home", 1, 0, 1, a).unwrap();
        // Not all blocks here: refused, nothing committed.
        assert_eq!(
            h.commit("w", 1, 0, manifest(1, &[a, b]), vec![]),
            Err(HolderError::Incomplete)
        );
        h.put("w", "home", 1, 0, 1, b).unwrap();
        // A size that does not add up is refused too.
        let mut wrong = manifest(1, &[a, b]);
        wrong.size += 1;
        assert_eq!(
            h.commit("w", 1, 0, wrong, vec![]),
            Err(HolderError::Incomplete)
        );
        h.commit("w", 1, 0, manifest(1, &[a, b]), vec![]).unwrap();
        assert_eq!(h.total_bytes(), 150);
        // The next shares block a: only c is new, b is freed at commit.
        h.put("w", "home", 1, 0, 2, a).unwrap();
        h.put("w", "home", 1, 0, 2, c).unwrap();
        assert_eq!(h.total_bytes(), 160);
        h.commit("w", 1, 0, manifest(2, &[a, c]), vec![]).unwrap();
        assert_eq!(h.total_bytes(), 110);
        assert_eq!(h.manifest(1, 0, None).unwrap(), Some(manifest(2, &[a, c])));
        let hash_b: BlockHash = Sha256::digest(b).into();
        assert_eq!(h.block(1, 0, &hash_b).unwrap(), None);
        let hash_c: BlockHash = Sha256::digest(c).into();
        assert_eq!(h.block(1, 0, &hash_c).unwrap().as_deref(), Some(c));
        // An older or equal one is refused.
        assert!(matches!(
            h.put("w", "home", 1, 0, 2, b),
            Err(HolderError::Stale { seq: 2, held: 2 })
        ));
        assert!(matches!(
            h.commit("w", 1, 0, manifest(1, &[a]), vec![]),
            Err(HolderError::Stale { .. })
        ));
        // Counted again the same after a restart.
        drop(h);
        let h = holder(dir.path(), HolderLimits::default());
        assert_eq!(h.total_bytes(), 110);
    }

    fn generation(seq: u64, generation: u64, blocks: &[&[u8]]) -> Manifest {
        Manifest {
            generation: Some(generation),
            ..manifest(seq, blocks)
        }
    }

    #[test]
    fn a_generation_keeps_the_one_before_it_in_the_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = holder(dir.path(), HolderLimits::default());
        let block = |n: u8| vec![n; 10];
        let (one, two, three, again) = (block(1), block(2), block(3), block(4));
        let commit = |h: &mut Holder, m: Manifest, data: &[u8]| {
            h.put("w", "home", 1, 0, m.seq, data).unwrap();
            h.commit("w", 1, 0, m, vec![]).unwrap();
        };
        commit(&mut h, generation(1, 1, &[&one]), &one);
        commit(&mut h, generation(2, 2, &[&two]), &two);
        // Both are held whole, each found by its number.
        assert_eq!(h.total_bytes(), 20);
        assert_eq!(
            h.manifest(1, 0, Some(1)).unwrap().unwrap().generation,
            Some(1)
        );
        assert_eq!(h.manifest(1, 0, None).unwrap().unwrap().seq, 2);
        // Generation 3 drops generation 1 and its blocks.
        commit(&mut h, generation(3, 3, &[&three]), &three);
        assert_eq!(h.total_bytes(), 20);
        assert_eq!(h.manifest(1, 0, Some(1)).unwrap(), None);
        let hash: BlockHash = Sha256::digest(&one).into();
        assert_eq!(h.block(1, 0, &hash).unwrap(), None);
        // The job rolled back to generation 2: the new timeline's
        // generation 3 (a newer number) keeps generation 2, not the old 3.
        commit(&mut h, generation(5 << 32, 3, &[&again]), &again);
        assert_eq!(h.manifest(1, 0, Some(3)).unwrap(), None);
        assert_eq!(
            h.manifest(1, 0, Some(2)).unwrap().unwrap().generation,
            Some(2)
        );
        assert_eq!(h.total_bytes(), 20);
        // A checkpoint with no generation keeps nothing before it.
        let plain = block(5);
        commit(&mut h, manifest(6 << 32, &[&plain]), &plain);
        assert_eq!(h.manifest(1, 0, Some(2)).unwrap(), None);
        assert_eq!(h.total_bytes(), 10);
        // Counted again the same after a restart.
        drop(h);
        let h = holder(dir.path(), HolderLimits::default());
        assert_eq!(h.total_bytes(), 10);
    }

    #[test]
    fn quotas_of_a_rank_a_sender_and_the_holder_are_checked_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HolderLimits {
            total_bytes: 1000,
            per_peer_bytes: 600,
            max_age: Duration::from_secs(3600),
        };
        let mut h = holder(dir.path(), limits);
        let block = |n: u8, len| vec![n; len];
        assert_eq!(
            h.put("w", "home", 1, 0, 1, &block(0, MAX_BLOCK_BYTES + 1)),
            Err(HolderError::BlockTooLarge(MAX_BLOCK_BYTES + 1))
        );
        h.put("w", "home", 1, 0, 1, &block(1, 300)).unwrap();
        h.put("w", "home", 1, 1, 1, &block(2, 300)).unwrap();
        // The same block again costs nothing.
        h.put("w", "home", 1, 1, 1, &block(2, 300)).unwrap();
        let refused = h.put("w", "home", 2, 0, 1, &block(3, 1)).unwrap_err();
        assert!(
            refused.to_string().contains("for the ranks of one node"),
            "{refused}"
        );
        h.put("v", "home", 2, 0, 1, &block(4, 400)).unwrap();
        let refused = h.put("u", "home", 3, 0, 1, &block(5, 1)).unwrap_err();
        assert!(refused.to_string().contains("in all"), "{refused}");
        assert_eq!(h.total_bytes(), 1000);
        // Another node may not write a rank of a job it names another home of.
        assert_eq!(
            h.put("x", "other", 1, 0, 1, &block(6, 1)),
            Err(HolderError::NotOwner)
        );
        assert_eq!(
            h.commit("x", 1, 0, manifest(1, &[&block(1, 300)]), vec![]),
            Err(HolderError::NotOwner)
        );
        // A checkpoint beyond the largest is refused from its manifest.
        let huge = Manifest {
            seq: 9,
            generation: None,
            size: MAX_CHECKPOINT_BYTES + 1,
            blocks: vec![],
        };
        assert!(matches!(
            h.commit("w", 1, 0, huge, vec![]),
            Err(HolderError::TooLarge { .. })
        ));
        let a_rank_quota = RANK_QUOTA;
        assert!(a_rank_quota >= 3 * MAX_CHECKPOINT_BYTES);
    }

    #[test]
    fn an_ended_job_and_old_ranks_are_collected() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = holder(dir.path(), HolderLimits::default());
        for (job, rank) in [(1, 0), (1, 1), (2, 0)] {
            let data = vec![rank as u8 + job as u8; 100];
            h.put("w", "home", job, rank, 1, &data).unwrap();
            h.commit("w", job, rank, manifest(1, &[&data]), vec![])
                .unwrap();
        }
        assert_eq!(h.total_bytes(), 300);
        // Only the job's home drops it.
        assert_eq!(h.drop_job("stranger", 1).unwrap(), 0);
        assert_eq!(h.drop_job("home", 1).unwrap(), 2);
        assert_eq!(h.total_bytes(), 100);
        assert_eq!(h.manifest(1, 0, None).unwrap(), None);
        assert!(h.manifest(2, 0, None).unwrap().is_some());
        // Nothing is old enough yet; with no age allowed, everything is.
        assert_eq!(h.expire().unwrap(), 0);
        h.limits.max_age = Duration::ZERO;
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(h.expire().unwrap(), 1);
        assert_eq!(h.total_bytes(), 0);
        // The space is free again for a new sender.
        h.put("v", "home", 3, 0, 1, &[7; 10]).unwrap();
    }
}
