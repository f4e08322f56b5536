//! The channels' tests: exact exchanges, hostile chunks, and random
//! breaks and readers against the credit bounds.

use std::collections::VecDeque;

use super::*;

const CH: ChannelId = ChannelId {
    job: 7,
    from: 0,
    from_incarnation: 0,
    to: 1,
    to_incarnation: 0,
};

/// Moves every transmittable chunk from `outbox` into `inbound`;
/// returns the messages completed.
fn pump(outbox: &mut Outbox, inbound: &mut Inbound) -> Vec<Vec<u8>> {
    let mut done = Vec::new();
    while let Some(chunk) = outbox.next_chunk(CHUNK_BYTES) {
        if let Received::Complete(m) = inbound.on_chunk(chunk).unwrap() {
            done.push(m);
        }
    }
    done
}

fn message(seq: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seq.wrapping_add(i as u8)).collect()
}

#[test]
fn messages_arrive_in_order_and_acks_free_them() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    for i in 0..5u8 {
        assert_eq!(out.admits(CH, 10), Admission::Yes);
        assert_eq!(out.push(CH, message(i, 10)), u64::from(i));
    }
    let got = pump(&mut out, &mut inb);
    assert_eq!(got, (0..5).map(|i| message(i, 10)).collect::<Vec<_>>());
    assert_eq!(out.buffered_bytes(), 5 * footprint(10));
    assert!(out.on_ack(inb.ack(CH)).unwrap());
    assert!(out.all_acked());
    assert_eq!(out.buffered_bytes(), 0);
}

#[test]
fn a_large_message_is_chunked_and_allocated_as_it_arrives() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    let big = message(3, 3 * CHUNK_BYTES + 5);
    // (The receiving rank lent the room.)
    inb.raise_limit(MAX_WINDOW);
    out.on_ack(inb.ack(CH)).unwrap();
    out.push(CH, big.clone());
    let first = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!((first.offset, first.bytes.len()), (0, CHUNK_BYTES));
    assert_eq!(inb.on_chunk(first).unwrap(), Received::Partial);
    // Only what arrived is held, not what the first chunk announced.
    assert!(inb.buffered_bytes() <= CHUNK_BYTES as u64);
    let rest = pump(&mut out, &mut inb);
    assert_eq!(rest, vec![big]);
}

/// Chunks handed out sharing their message are the chunks `next_chunk`
/// hands out, and an ask is left to `next_chunk`.
#[test]
fn shared_chunks_are_the_same_chunks_and_leave_asks_to_next_chunk() {
    let (mut out, mut inb) = (Outbox::new(), Inbound::new());
    inb.raise_limit(MAX_WINDOW);
    out.on_ack(inb.ack(CH)).unwrap();
    let big = message(1, 2 * CHUNK_BYTES + 3);
    out.push(CH, message(0, 10));
    out.push(CH, big.clone());
    let mut got = Vec::new();
    while let Some(shared) = out.next_shared(CHUNK_BYTES) {
        if let Received::Complete(m) = inb.on_chunk(shared.chunk()).unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got, vec![message(0, 10), big]);
    // Short of credit with everything acknowledged: an ask, which only
    // `next_chunk` hands out.
    out.on_ack(inb.ack(CH)).unwrap();
    let len = MAX_WINDOW * 2;
    assert_eq!(out.admits(CH, len), Admission::Ask);
    out.ask(CH, len);
    assert!(out.ask_next());
    assert!(out.next_shared(CHUNK_BYTES).is_none());
    let ask = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!((ask.total, ask.bytes.len()), (len, 0));
}

#[test]
fn a_rewind_resends_what_was_not_acked_and_duplicates_are_dropped() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    inb.raise_limit(MAX_WINDOW);
    out.on_ack(inb.ack(CH)).unwrap();
    out.push(CH, message(0, 10));
    out.push(CH, message(1, CHUNK_BYTES + 10));
    out.push(CH, message(2, 10));
    // Message 0 arrives, message 1 half, then the stream breaks; the
    // ack of message 0 is lost with it.
    let c = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(inb.on_chunk(c).unwrap(), Received::Complete(message(0, 10)));
    let c = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(inb.on_chunk(c).unwrap(), Received::Partial);
    inb.stream_lost();
    out.rewind();
    // On the new stream: 0 again (a duplicate), then 1 and 2 whole.
    let c = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(c.seq, 0);
    assert_eq!(inb.on_chunk(c).unwrap(), Received::Duplicate);
    let got = pump(&mut out, &mut inb);
    assert_eq!(got, vec![message(1, CHUNK_BYTES + 10), message(2, 10)]);
    out.on_ack(inb.ack(CH)).unwrap();
    assert!(out.all_acked());
}

#[test]
fn a_rewind_after_an_ack_sends_only_the_rest() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    for i in 0..4 {
        out.push(CH, message(i, 100));
    }
    let got = pump(&mut out, &mut inb);
    assert_eq!(got.len(), 4);
    // The ack after message 1 got through; 2 and 3 arrived unacked.
    out.on_ack(Ack {
        channel: CH,
        next: 2,
        limit: INITIAL_WINDOW,
    })
    .unwrap();
    out.rewind();
    let mut seqs = Vec::new();
    while let Some(c) = out.next_chunk(CHUNK_BYTES) {
        seqs.push(c.seq);
        assert_eq!(inb.on_chunk(c).unwrap(), Received::Duplicate);
    }
    assert_eq!(seqs, vec![2, 3]);
}

/// The worker reads `len` bytes of `CH`: the rank lends credit, the
/// channel takes it.
fn read(rank: &mut RankReceiver<ChannelId>, inb: &mut Inbound, len: u64) {
    inb.consumed(len);
    rank.consumed(&CH, len);
    inb.raise_limit(rank.credit(&CH));
}

#[test]
fn a_sender_waits_for_credit_and_the_receiver_enforces_it() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    let mut rank = RankReceiver::default();
    let half = INITIAL_WINDOW / 2 - MESSAGE_OVERHEAD;
    out.push(CH, message(0, half as usize));
    out.push(CH, message(1, half as usize));
    assert_eq!(out.admits(CH, 0), Admission::WaitForCredit);
    assert_eq!(pump(&mut out, &mut inb).len(), 2);
    out.on_ack(inb.ack(CH)).unwrap();
    // Received but not read: still no credit; everything is
    // acknowledged, so the sender asks.
    assert_eq!(out.admits(CH, 0), Admission::Ask);
    // A sender that ignores it is caught.
    out.push(CH, message(2, 1));
    let c = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(inb.on_chunk(c), Err(Violation::NoCredit));
    // Once the worker reads one, credit comes back.
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    out.push(CH, message(0, half as usize));
    out.push(CH, message(1, half as usize));
    pump(&mut out, &mut inb);
    read(&mut rank, &mut inb, half);
    assert!(out.on_ack(inb.ack(CH)).unwrap());
    assert_eq!(out.admits(CH, half), Admission::Yes);
    assert_eq!(out.admits(CH, half + 1), Admission::Ask);
    assert_eq!(rank.lent(), 0, "small messages take nothing of the budget");
}

#[test]
fn a_message_larger_than_the_window_goes_when_the_receiver_lends_room() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    let mut rank = RankReceiver::default();
    let big = 3 * INITIAL_WINDOW;
    out.push(CH, vec![7; 10]);
    assert_eq!(out.admits(CH, big), Admission::WaitForCredit);
    let first = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(
        inb.on_chunk(first).unwrap(),
        Received::Complete(vec![7; 10])
    );
    out.on_ack(inb.ack(CH)).unwrap();
    assert_eq!(out.admits(CH, big), Admission::Ask);
    out.ask(CH, big);
    out.ask(CH, big);
    // The ask goes once, without bytes.
    let ask = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(
        (ask.seq, ask.offset, ask.total, ask.bytes.len()),
        (1, 0, big, 0)
    );
    assert_eq!(inb.on_chunk(ask).unwrap(), Received::Asked { total: big });
    assert!(out.next_chunk(CHUNK_BYTES).is_none());
    // A lost stream sends the ask again.
    out.rewind();
    let again = out.next_chunk(CHUNK_BYTES).unwrap();
    assert_eq!(inb.on_chunk(again).unwrap(), Received::Asked { total: big });
    // The rank lends a window of twice the message.
    assert_eq!(rank.asked(CH, inb.completed(), big), vec![CH]);
    assert_eq!(rank.asked(CH, inb.completed(), big), vec![CH], "again");
    inb.raise_limit(rank.credit(&CH));
    assert_eq!(rank.lent(), 2 * footprint(big) - INITIAL_WINDOW);
    out.on_ack(inb.ack(CH)).unwrap();
    assert_eq!(out.admits(CH, big), Admission::Yes);
    out.push(CH, vec![1; big as usize]);
    let got = pump(&mut out, &mut inb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len() as u64, big);
    // Once read, the window stays: the next one goes at once.
    read(&mut rank, &mut inb, 10);
    read(&mut rank, &mut inb, big);
    out.on_ack(inb.ack(CH)).unwrap();
    assert_eq!(out.admits(CH, big), Admission::Yes);
    assert_eq!(out.admits(CH, MAX_MESSAGE_BYTES + 1), Admission::TooLarge);
}

#[test]
fn a_large_message_without_credit_is_refused() {
    let mut inb = Inbound::new();
    let chunk = Chunk {
        channel: CH,
        seq: 0,
        offset: 0,
        total: INITIAL_WINDOW,
        bytes: &[0; 16],
    };
    assert_eq!(inb.on_chunk(chunk), Err(Violation::NoCredit));
    // An ask out of order is a violation too; one for a message that
    // arrived already is a duplicate.
    let ask = |seq| Chunk {
        channel: CH,
        seq,
        offset: 0,
        total: INITIAL_WINDOW,
        bytes: &[],
    };
    assert!(matches!(
        inb.on_chunk(ask(3)),
        Err(Violation::OutOfOrder { .. })
    ));
    assert_eq!(
        inb.on_chunk(ask(0)),
        Ok(Received::Asked {
            total: INITIAL_WINDOW
        })
    );
    let mut rank = RankReceiver::default();
    assert_eq!(rank.asked(CH, 0, INITIAL_WINDOW), vec![CH]);
    inb.raise_limit(rank.credit(&CH));
    assert!(matches!(inb.on_chunk(chunk), Ok(Received::Partial)));
    // A limit is never lowered.
    inb.raise_limit(0);
    assert!(inb.limit() >= footprint(INITIAL_WINDOW));
}

#[test]
fn channels_interleave_chunk_by_chunk() {
    let other = ChannelId { job: 8, ..CH };
    let mut out = Outbox::new();
    out.push(CH, vec![0; 3 * CHUNK_BYTES]);
    out.push(other, vec![1; 10]);
    let order: Vec<_> =
        std::iter::from_fn(|| out.next_chunk(CHUNK_BYTES).map(|c| c.channel)).collect();
    assert_eq!(order, vec![CH, other, CH, CH]);
}

#[test]
fn hostile_chunks_are_refused() {
    let chunk = |seq, offset, total, bytes| Chunk {
        channel: CH,
        seq,
        offset,
        total,
        bytes,
    };
    let mut inb = Inbound::new();
    assert_eq!(
        inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES + 1, &[1])),
        Err(Violation::TooLarge(MAX_MESSAGE_BYTES + 1))
    );
    assert!(matches!(
        inb.on_chunk(chunk(1, 0, 1, &[1])),
        Err(Violation::OutOfOrder { .. })
    ));
    assert_eq!(
        inb.on_chunk(chunk(0, 0, 1, &[1, 2])),
        Err(Violation::BadChunk)
    );
    // An empty first chunk of a non-empty message is an ask; an empty
    // chunk anywhere else is not a chunk.
    assert_eq!(inb.on_chunk(chunk(0, 1, 5, &[])), Err(Violation::BadChunk));
    assert!(matches!(
        inb.on_chunk(chunk(0, 2, 5, &[1])),
        Err(Violation::BadOffset { .. })
    ));
    assert_eq!(inb.on_chunk(chunk(0, 0, 5, &[1, 2])), Ok(Received::Partial));
    assert!(matches!(
        inb.on_chunk(chunk(0, 3, 5, &[1])),
        Err(Violation::BadOffset { .. })
    ));
    assert_eq!(inb.on_chunk(chunk(0, 2, 6, &[1])), Err(Violation::BadChunk));
    // A 64 MiB announcement (granted) holds only what came.
    let mut inb = Inbound::new();
    assert_eq!(
        inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES, &[])),
        Ok(Received::Asked {
            total: MAX_MESSAGE_BYTES
        })
    );
    inb.raise_limit(footprint(MAX_MESSAGE_BYTES));
    assert_eq!(
        inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES, &[1; 10])),
        Ok(Received::Partial)
    );
    assert!(inb.buffered_bytes() <= 10);
    // An ack of messages never pushed.
    let mut out = Outbox::new();
    out.push(CH, vec![1]);
    assert_eq!(
        out.on_ack(Ack {
            channel: CH,
            next: 5,
            limit: 0
        }),
        Err(Violation::AckBeyondSent(5))
    );
}

#[test]
fn empty_messages_are_carried() {
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    out.push(CH, Vec::new());
    out.push(CH, vec![9]);
    assert_eq!(pump(&mut out, &mut inb), vec![vec![], vec![9]]);
}

/// Random faults: streams break at random points, acks are lost; every
/// message is delivered exactly once, in order, and memory stays within
/// the bounds.
#[test]
fn random_breaks_never_lose_or_duplicate() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(14);
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    let mut rank = RankReceiver::default();
    let mut sent = 0u8;
    let mut got = Vec::new();
    let mut read = 0;
    for _ in 0..5_000 {
        match rng.random_range(0..10) {
            0..=3 => {
                let len = rng.random_range(0..CHUNK_BYTES * 2) as u64;
                match out.admits(CH, len) {
                    Admission::Yes if sent < 200 => {
                        out.push(CH, vec![sent; len as usize]);
                        sent += 1;
                    }
                    Admission::Ask => out.ask(CH, len),
                    _ => {}
                }
            }
            4..=6 => {
                if let Some(c) = out.next_chunk(rng.random_range(1..CHUNK_BYTES)) {
                    match inb.on_chunk(c).unwrap() {
                        Received::Complete(m) => got.push(m),
                        Received::Asked { total } => {
                            for c in rank.asked(CH, inb.completed(), total) {
                                inb.raise_limit(rank.credit(&c));
                            }
                        }
                        _ => {}
                    }
                }
            }
            7 => {
                // The worker reads what arrived; the ack may get lost.
                read_arrived(&mut inb, &mut rank, &got, &mut read);
                if rng.random_bool(0.5) {
                    out.on_ack(inb.ack(CH)).unwrap();
                }
            }
            8 => {
                inb.stream_lost();
                out.rewind();
            }
            _ => {
                out.on_ack(inb.ack(CH)).unwrap();
            }
        }
        assert!(inb.buffered_bytes() <= rank.bound(1));
        assert!(rank.lent() <= RANK_BUDGET);
        assert!(out.buffered_bytes() <= MAX_WINDOW + 2 * footprint(CHUNK_BYTES as u64));
    }
    // Drain.
    for _ in 0..10_000 {
        read_arrived(&mut inb, &mut rank, &got, &mut read);
        out.on_ack(inb.ack(CH)).unwrap();
        match out.next_chunk(CHUNK_BYTES) {
            Some(c) => match inb.on_chunk(c).unwrap() {
                Received::Complete(m) => got.push(m),
                Received::Asked { total } => {
                    rank.asked(CH, inb.completed(), total);
                    inb.raise_limit(rank.credit(&CH));
                }
                _ => {}
            },
            None => break,
        }
    }
    assert!(sent > 20, "{sent}");
    assert_eq!(got.len(), usize::from(sent));
    for (i, m) in got.iter().enumerate() {
        assert!(m.iter().all(|b| usize::from(*b) == i), "message {i} wrong");
    }
}

// ----- striping -----

/// A chunk of `message` (message `seq` of [`CH`]) at chunk index `i`.
fn striped_chunk(seq: u64, message: &[u8], i: usize) -> Chunk<'_> {
    let start = i * CHUNK_BYTES;
    let end = (start + CHUNK_BYTES).min(message.len());
    Chunk {
        channel: CH,
        seq,
        offset: start as u64,
        total: message.len() as u64,
        bytes: &message[start..end],
    }
}

#[test]
fn a_striped_message_arrives_out_of_order_and_holds_only_what_came() {
    let big = message(5, 4 * CHUNK_BYTES + 7);
    let mut inb = Inbound::new();
    inb.raise_limit(footprint(big.len() as u64));
    // Chunks 3, 1, 4 (the short last) arrive before 0 and 2.
    for i in [3, 1, 4] {
        assert_eq!(
            inb.on_chunk(striped_chunk(0, &big, i)),
            Ok(Received::Partial)
        );
    }
    assert_eq!(inb.buffered_bytes(), 2 * CHUNK_BYTES as u64 + 7);
    // The same chunks again (a lane of an older connection) change nothing.
    for i in [1, 4] {
        assert_eq!(
            inb.on_chunk(striped_chunk(0, &big, i)),
            Ok(Received::Partial)
        );
    }
    assert_eq!(inb.buffered_bytes(), 2 * CHUNK_BYTES as u64 + 7);
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 0)),
        Ok(Received::Partial)
    );
    // Chunk 0 joined chunk 1: held once, in the message.
    assert_eq!(inb.buffered_bytes(), 3 * CHUNK_BYTES as u64 + 7);
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 0)),
        Ok(Received::Partial)
    );
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 2)),
        Ok(Received::Complete(big.clone()))
    );
    assert_eq!(inb.next(), 1);
    // A chunk of it once it is complete is a duplicate.
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 3)),
        Ok(Received::Duplicate)
    );
}

#[test]
fn striped_chunks_are_checked() {
    let big = message(1, 3 * CHUNK_BYTES);
    let mut inb = Inbound::new();
    // Beyond the credit, whichever chunk comes first.
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 2)),
        Err(Violation::NoCredit)
    );
    inb.raise_limit(footprint(big.len() as u64));
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 2)),
        Ok(Received::Partial)
    );
    // A later message while this one is being built: out of order.
    assert!(matches!(
        inb.on_chunk(striped_chunk(1, &big, 1)),
        Err(Violation::OutOfOrder {
            got: 1,
            expected: 0
        })
    ));
    // Ahead of what arrived, but not at a chunk boundary, or short.
    let odd = Chunk {
        offset: CHUNK_BYTES as u64 + 1,
        bytes: &big[..10],
        ..striped_chunk(0, &big, 1)
    };
    assert!(matches!(
        inb.on_chunk(odd),
        Err(Violation::BadOffset { .. })
    ));
    let short = Chunk {
        bytes: &big[..10],
        ..striped_chunk(0, &big, 1)
    };
    assert!(matches!(
        inb.on_chunk(short),
        Err(Violation::BadOffset { .. })
    ));
    // The same chunk with another length, or the message with another.
    let shorter = Chunk {
        bytes: &big[..10],
        total: big.len() as u64,
        offset: 2 * CHUNK_BYTES as u64,
        ..striped_chunk(0, &big, 2)
    };
    assert_eq!(
        inb.on_chunk(shorter),
        Err(Violation::BadOffset {
            got: 2 * CHUNK_BYTES as u64,
            expected: 0
        })
    );
    let other_total = Chunk {
        total: big.len() as u64 + 1,
        ..striped_chunk(0, &big, 1)
    };
    assert_eq!(inb.on_chunk(other_total), Err(Violation::BadChunk));
}

#[test]
fn a_striped_message_is_alone_on_its_channel() {
    let other = ChannelId { job: 8, ..CH };
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    inb.raise_limit(MAX_WINDOW);
    out.on_ack(inb.ack(CH)).unwrap();
    out.set_striping(true);
    let big = message(2, 6 * CHUNK_BYTES);
    assert!(big.len() as u64 >= STRIPE_BYTES);
    out.push(CH, vec![1; 10]);
    // Pushed behind an unacknowledged message: it goes on the stream at
    // once, unstriped, rather than wait for that message's ack.
    out.push(CH, message(9, 6 * CHUNK_BYTES));
    assert!(!out.has_lane_work());
    let sent: Vec<_> =
        std::iter::from_fn(|| out.next_chunk(CHUNK_BYTES).map(|c| (c.channel, c.seq))).collect();
    assert_eq!(sent, [vec![(CH, 0)], vec![(CH, 1); 6]].concat());
    out.on_ack(Ack {
        channel: CH,
        next: 2,
        limit: MAX_WINDOW,
    })
    .unwrap();
    // Pushed onto an idle channel: striped, and alone on it.
    out.push(CH, big.clone());
    out.push(CH, vec![3; 10]);
    out.push(other, vec![4; 10]);
    let sent: Vec<_> =
        std::iter::from_fn(|| out.next_chunk(CHUNK_BYTES).map(|c| (c.channel, c.seq))).collect();
    assert_eq!(sent, vec![(other, 0)], "only the other channel's");
    // Its chunks go to the lanes (not the stream), whole and at chunk
    // boundaries, and nothing after it.
    assert!(out.has_lane_work());
    assert!(out.next_shared(CHUNK_BYTES).is_none());
    let chunks: Vec<_> = std::iter::from_fn(|| out.next_lane()).collect();
    assert!(chunks.iter().all(|c| c.seq == 2));
    let mut ends: Vec<_> = chunks
        .iter()
        .map(|c| (c.offset, c.offset + c.bytes().len() as u64))
        .collect();
    ends.sort();
    assert!(
        ends.windows(2).all(|w| w[0].1 == w[1].0),
        "the chunks cover the message: {ends:?}"
    );
    assert_eq!(ends.last().map(|e| e.1), Some(big.len() as u64));
    assert!(out.next_chunk(CHUNK_BYTES).is_none());
    // In any order, the receiver builds it.
    assert_eq!(
        inb.on_chunk(Chunk {
            channel: CH,
            seq: 0,
            offset: 0,
            total: 10,
            bytes: &[1; 10]
        }),
        Ok(Received::Complete(vec![1; 10]))
    );
    let first = message(9, 6 * CHUNK_BYTES);
    for (i, bytes) in first.chunks(CHUNK_BYTES).enumerate() {
        inb.on_chunk(Chunk {
            channel: CH,
            seq: 1,
            offset: (i * CHUNK_BYTES) as u64,
            total: first.len() as u64,
            bytes,
        })
        .unwrap();
    }
    let mut done = None;
    for c in chunks.iter().rev() {
        if let Received::Complete(m) = inb.on_chunk(c.chunk()).unwrap() {
            done = Some(m);
        }
    }
    assert_eq!(done, Some(big));
    out.on_ack(inb.ack(CH)).unwrap();
    assert_eq!(out.next_chunk(CHUNK_BYTES).map(|c| c.seq), Some(3));
}

/// After a refusal (the receiver drops what comes before a message's first
/// chunk), the message sent again goes unstriped on the stream, from its
/// start; the next is striped again.
#[test]
fn a_striped_message_sent_again_after_a_refusal_goes_on_the_stream() {
    let mut out = Outbox::new();
    out.on_ack(Ack {
        channel: CH,
        next: 0,
        limit: MAX_WINDOW,
    })
    .unwrap();
    out.set_striping(true);
    let big = message(4, 4 * CHUNK_BYTES);
    out.push(CH, big.clone());
    assert_eq!(out.next_lane().map(|c| (c.seq, c.offset)), Some((0, 0)));
    out.rewind_channel(CH);
    assert!(out.next_lane().is_none());
    let again: Vec<_> =
        std::iter::from_fn(|| out.next_chunk(CHUNK_BYTES).map(|c| (c.seq, c.offset))).collect();
    let offsets: Vec<_> = (0..4).map(|i| (0, (i * CHUNK_BYTES) as u64)).collect();
    assert_eq!(again, offsets);
    out.on_ack(Ack {
        channel: CH,
        next: 1,
        limit: MAX_WINDOW,
    })
    .unwrap();
    out.push(CH, big.clone());
    assert!(out.next_chunk(CHUNK_BYTES).is_none());
    assert_eq!(out.next_lane().map(|c| (c.seq, c.offset)), Some((1, 0)));
}

/// The worker reads the messages that arrived since `read`: their credit
/// goes back to the channel.
fn read_arrived(
    inb: &mut Inbound,
    rank: &mut RankReceiver<ChannelId>,
    got: &[Vec<u8>],
    read: &mut usize,
) {
    for m in &got[*read..] {
        inb.consumed(m.len() as u64);
        rank.consumed(&CH, m.len() as u64);
    }
    *read = got.len();
    inb.raise_limit(rank.credit(&CH));
}

/// A chunk in flight: its number, offset, message length and bytes.
type Flying = (u64, u64, u64, Vec<u8>);

/// Random faults with striping: chunks go over a stream and two lanes,
/// delivered in a random interleaving (each connection in order), the
/// connections break together at random points, lanes come and go; every
/// message is delivered exactly once, in order, and the receiver holds no
/// more than its bound.
#[test]
fn random_breaks_with_lanes_never_lose_or_duplicate() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(29);
    let mut out = Outbox::new();
    let mut inb = Inbound::new();
    let mut rank = RankReceiver::default();
    let mut sent = 0u8;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut read = 0;
    // In flight on the stream and on each lane: (seq, offset, total, bytes).
    let mut wires: [VecDeque<Flying>; 3] = Default::default();
    let mut stale: VecDeque<Flying> = VecDeque::new();
    let mut laned = 0;
    let deliver = |inb: &mut Inbound,
                   rank: &mut RankReceiver<ChannelId>,
                   got: &mut Vec<Vec<u8>>,
                   (seq, offset, total, bytes): Flying| {
        let chunk = Chunk {
            channel: CH,
            seq,
            offset,
            total,
            bytes: &bytes,
        };
        match inb.on_chunk(chunk).unwrap() {
            Received::Complete(m) => got.push(m),
            Received::Asked { total } => {
                for c in rank.asked(CH, inb.completed(), total) {
                    inb.raise_limit(rank.credit(&c));
                }
            }
            _ => {}
        }
    };
    for step in 0..40_000 {
        match rng.random_range(0..14) {
            0..=2 => {
                let len = if rng.random_bool(0.9) {
                    rng.random_range(STRIPE_BYTES as usize..3 * STRIPE_BYTES as usize)
                } else {
                    rng.random_range(0..CHUNK_BYTES * 2)
                } as u64;
                // Mostly onto an idle channel (only such a large message
                // is striped), sometimes behind others (it goes on the
                // stream).
                let idle = out.buffered_bytes() == 0 || rng.random_bool(0.02);
                match out.admits(CH, len) {
                    Admission::Yes if sent < 250 && idle => {
                        out.push(CH, vec![sent; len as usize]);
                        sent += 1;
                    }
                    Admission::Ask => out.ask(CH, len),
                    _ => {}
                }
            }
            3..=4 => {
                if let Some(c) = out.next_chunk(rng.random_range(1..=CHUNK_BYTES)) {
                    wires[0].push_back((c.seq, c.offset, c.total, c.bytes.to_vec()));
                }
            }
            5..=6 => {
                let lane = rng.random_range(1..3);
                if let Some(c) = out.next_lane() {
                    laned += 1;
                    let c = c.chunk();
                    wires[lane].push_back((c.seq, c.offset, c.total, c.bytes.to_vec()));
                }
            }
            7..=9 => {
                let wire = rng.random_range(0..3);
                if let Some(c) = wires[wire].pop_front() {
                    deliver(&mut inb, &mut rank, &mut got, c);
                }
            }
            10 => {
                // The worker reads what arrived; the ack may get lost.
                read_arrived(&mut inb, &mut rank, &got, &mut read);
                if rng.random_bool(0.5) {
                    out.on_ack(inb.ack(CH)).unwrap();
                }
            }
            11 => {
                if rng.random_bool(0.05) {
                    // Every connection breaks; what a lane still carried
                    // may arrive later (it is refused as stale by the
                    // node, but must not corrupt anything if it were not).
                    for wire in &mut wires[1..] {
                        stale.extend(wire.drain(..));
                    }
                    wires[0].clear();
                    inb.stream_lost();
                    out.rewind();
                } else if !out.striping() {
                    out.set_striping(true);
                }
            }
            12 => {
                if let Some(c) = stale.pop_front()
                    && step % 2 == 0
                {
                    // Stale chunks of the message expected next carry its
                    // bytes: harmless. Of later ones they would be a
                    // violation (the node drops a stale lane first).
                    if c.0 <= inb.next() {
                        deliver(&mut inb, &mut rank, &mut got, c);
                    }
                }
            }
            _ => {
                out.on_ack(inb.ack(CH)).unwrap();
            }
        }
        assert!(inb.buffered_bytes() <= rank.bound(1));
    }
    // Drain.
    for _ in 0..100_000 {
        read_arrived(&mut inb, &mut rank, &got, &mut read);
        out.on_ack(inb.ack(CH)).unwrap();
        for wire in &mut wires {
            while let Some(c) = wire.pop_front() {
                deliver(&mut inb, &mut rank, &mut got, c);
            }
        }
        let lane = out.next_lane().map(|c| {
            let c = c.chunk();
            (c.seq, c.offset, c.total, c.bytes.to_vec())
        });
        let stream = out
            .next_chunk(CHUNK_BYTES)
            .map(|c| (c.seq, c.offset, c.total, c.bytes.to_vec()));
        if lane.is_none() && stream.is_none() && out.all_acked() {
            break;
        }
        wires[1].extend(lane);
        wires[0].extend(stream);
    }
    assert!(sent > 20, "{sent}");
    assert!(
        laned > 100,
        "{laned} chunks on lanes, {sent} sent, {} got",
        got.len()
    );
    assert_eq!(got.len(), usize::from(sent));
    for (i, m) in got.iter().enumerate() {
        assert!(m.iter().all(|b| usize::from(*b) == i), "message {i} wrong");
    }
}

// ----- a receiving rank's policy -----

/// One sending worker: its channel to the rank, at both ends, and the
/// lengths of the messages it still has to send (made when sent, each
/// naming its sender and number).
struct Sender {
    ch: ChannelId,
    out: Outbox,
    inb: Inbound,
    todo: VecDeque<usize>,
    pushed: u32,
    next_expected: u32,
}

/// Many senders to one rank, chunks moved at once (no network), and a
/// worker that reads the rank's inbox in arrival order.
struct Grid {
    rank: RankReceiver<usize>,
    senders: Vec<Sender>,
    inbox: VecDeque<(usize, Vec<u8>)>,
    /// Messages read per sender.
    read: Vec<u32>,
}

fn tagged(sender: usize, n: u32, len: usize) -> Vec<u8> {
    let mut m = vec![(sender % 251) as u8; len.max(8)];
    m[..4].copy_from_slice(&(sender as u32).to_le_bytes());
    m[4..8].copy_from_slice(&n.to_le_bytes());
    m
}

impl Grid {
    /// `senders` workers, each with `sizes(sender, n)`-byte messages.
    fn new(senders: usize, count: u32, sizes: impl Fn(usize, u32) -> usize) -> Grid {
        Grid {
            rank: RankReceiver::default(),
            senders: (0..senders)
                .map(|i| Sender {
                    ch: ChannelId {
                        job: 1,
                        from: i as u32,
                        from_incarnation: 0,
                        to: 0,
                        to_incarnation: 0,
                    },
                    out: Outbox::new(),
                    inb: Inbound::new(),
                    todo: (0..count).map(|n| sizes(i, n).max(8)).collect(),
                    pushed: 0,
                    next_expected: 0,
                })
                .collect(),
            inbox: VecDeque::new(),
            read: vec![0; senders],
        }
    }

    fn raise(&mut self, raised: Vec<usize>) {
        for i in raised {
            let credit = self.rank.credit(&i);
            self.senders[i].inb.raise_limit(credit);
        }
    }

    /// Sender `i` pushes what its credit allows (asking when it
    /// must), and its chunks and acks go across.
    fn send(&mut self, i: usize) {
        let s = &mut self.senders[i];
        while let Some(&len) = s.todo.front() {
            match s.out.admits(s.ch, len as u64) {
                Admission::Yes => {
                    s.todo.pop_front();
                    s.out.push(s.ch, tagged(i, s.pushed, len));
                    s.pushed += 1;
                }
                Admission::Ask => {
                    s.out.ask(s.ch, len as u64);
                    break;
                }
                _ => break,
            }
        }
        let mut raised = Vec::new();
        while let Some(c) = s.out.next_chunk(CHUNK_BYTES) {
            match s.inb.on_chunk(c).unwrap() {
                Received::Complete(m) => self.inbox.push_back((i, m)),
                Received::Asked { total } => {
                    raised.extend(self.rank.asked(i, s.inb.completed(), total));
                }
                _ => {}
            }
        }
        self.raise(raised);
        let s = &mut self.senders[i];
        s.out.on_ack(s.inb.ack(s.ch)).unwrap();
    }

    /// The worker reads its next message; checks its order.
    fn read_one(&mut self) -> bool {
        let Some((i, m)) = self.inbox.pop_front() else {
            return false;
        };
        let n = u32::from_le_bytes(m[4..8].try_into().unwrap());
        assert_eq!(n, self.senders[i].next_expected, "sender {i} out of order");
        self.senders[i].next_expected += 1;
        self.read[i] += 1;
        self.senders[i].inb.consumed(m.len() as u64);
        let raised = self.rank.consumed(&i, m.len() as u64);
        self.raise(raised);
        true
    }

    /// Bytes the rank holds: unread messages and halves.
    fn held(&self) -> u64 {
        self.senders.iter().map(|s| s.inb.buffered_bytes()).sum()
    }

    fn check_bound(&self) {
        let bound = self.rank.bound(self.senders.len() as u64);
        assert!(self.held() <= bound, "{} > {bound}", self.held());
        // Whatever the senders do next, they cannot exceed it either.
        let unknown = self.senders.len() as u64 * INITIAL_WINDOW;
        assert!(self.rank.outstanding() <= bound + unknown);
        assert!(self.rank.lent() <= RANK_BUDGET);
        for s in &self.senders {
            // The receiver's limit is what the rank lent, no more.
            assert!(s.inb.limit() <= self.rank.credit(&(s.ch.from as usize)));
        }
    }

    fn done(&self) -> bool {
        self.senders.iter().all(|s| s.todo.is_empty()) && self.inbox.is_empty()
    }
}

/// Sizes from 0 B to 64 MiB: most small, some of a few MiB, a few
/// larger than any window.
fn mixed(i: usize, n: u32) -> usize {
    match (i as u32 * 7 + n * 13) % 10 {
        0..=4 => (i + n as usize * 100) % 2000,
        5..=6 => 100 * 1024,
        7 => 1 << 20,
        8 => 5 << 20,
        _ => 12 << 20,
    }
}

#[test]
fn many_senders_cannot_make_a_rank_hold_more_than_the_bound() {
    let senders = 48;
    let mut grid = Grid::new(senders, 6, mixed);
    // The worker never reads: every sender pushes all its credit
    // allows, again and again.
    for _ in 0..5 {
        for i in 0..senders {
            grid.send(i);
            grid.check_bound();
        }
    }
    let held = grid.held();
    // The budget, the initial windows and the largest message (12 MiB)
    // granted beyond the budget, although the senders want far more.
    let tight = RANK_BUDGET + senders as u64 * INITIAL_WINDOW + footprint(12 << 20);
    let wanted: u64 = (0..senders)
        .flat_map(|i| (0..6).map(move |n| mixed(i, n) as u64))
        .sum();
    assert!(wanted > 4 * tight, "{wanted}");
    assert!(held <= tight, "{held}");
    assert!(held > RANK_BUDGET / 2, "the budget is used: {held}");
    // Then the worker reads: every sender's messages arrive, in order.
    for _ in 0..100_000 {
        if grid.done() {
            break;
        }
        if !grid.read_one() {
            for i in 0..senders {
                grid.send(i);
            }
        }
        grid.check_bound();
    }
    assert!(grid.done(), "{:?}", grid.read);
    assert!(grid.read.iter().all(|&n| n == 6), "{:?}", grid.read);
    assert_eq!(grid.rank.lent(), grid.rank.lent().min(RANK_BUDGET));
}

#[test]
fn a_slow_reader_lets_every_sender_progress() {
    let senders = 40;
    // Every sender has messages of a few hundred KiB: the budget
    // cannot give them all a window at once.
    let mut grid = Grid::new(senders, 10, |i, n| 200 * 1024 + (i + n as usize) * 1000);
    let mut step = 0u32;
    let mut progressed_by: Vec<Option<u32>> = vec![None; senders];
    for _ in 0..200_000 {
        if grid.done() {
            break;
        }
        step += 1;
        grid.send(step as usize % senders);
        // One read for every five sends.
        if step.is_multiple_of(5) {
            grid.read_one();
        }
        grid.check_bound();
        for (i, p) in progressed_by.iter_mut().enumerate() {
            if p.is_none() && grid.read[i] > 0 {
                *p = Some(step);
            }
        }
    }
    assert!(grid.done(), "{:?}", grid.read);
    // Every sender's first message came long before the last sender
    // finished: no sender waited for all the others.
    let last = progressed_by.iter().map(|p| p.unwrap()).max().unwrap();
    assert!(last < step / 2, "{last} of {step}");
}

#[test]
fn large_messages_are_granted_one_at_a_time_beyond_the_budget() {
    let mut rank: RankReceiver<u32> = RankReceiver::default();
    let big = 20 << 20;
    // Two asks for messages above any window: the first is granted,
    // the second waits.
    assert_eq!(rank.asked(1, 0, big), vec![1]);
    assert_eq!(rank.credit(&1), footprint(big));
    assert_eq!(rank.lent(), 0, "beyond the budget");
    assert_eq!(rank.asked(2, 0, big), Vec::<u32>::new());
    assert!(rank.is_waiting(&2));
    // A small ask behind it waits its turn too (no overtaking), but a
    // message that fits the initial window needs no ask at all.
    assert_eq!(rank.asked(3, 0, 1 << 20), Vec::<u32>::new());
    assert!(rank.is_waiting(&3));
    // Asked again (a new stream): the grant again.
    assert_eq!(rank.asked(1, 0, big), vec![1]);
    // Half read: still held. All read: the next two are served, 2 by
    // the grant, 3 from the budget.
    assert_eq!(rank.consumed(&1, big / 2), Vec::<u32>::new());
    let mut raised = rank.consumed(&1, big - big / 2);
    raised.sort();
    assert_eq!(raised, vec![1, 2, 3]);
    assert_eq!(rank.credit(&2), footprint(big));
    assert!(rank.credit(&3) >= footprint(1 << 20));
    // A holder that is gone holds nothing.
    assert_eq!(rank.asked(4, 0, big), Vec::<u32>::new());
    assert_eq!(rank.forget(&2), vec![4]);
    assert_eq!(rank.credit(&4), footprint(big));
}

#[test]
fn windows_grow_for_large_messages_and_shrink_under_pressure() {
    let mut rank: RankReceiver<u32> = RankReceiver::default();
    // A sender of 4 MiB messages gets a window for two.
    let m = 4 << 20;
    assert_eq!(rank.asked(1, 0, m), vec![1]);
    assert_eq!(rank.credit(&1), MAX_WINDOW);
    // Its reads keep the window: the limit follows the reads.
    assert_eq!(rank.consumed(&1, m), vec![1]);
    assert_eq!(rank.credit(&1), footprint(m) + MAX_WINDOW);
    // A second one takes the rest of the budget.
    assert_eq!(rank.asked(2, 0, m), vec![2]);
    assert_eq!(rank.lent(), 2 * (MAX_WINDOW - INITIAL_WINDOW));
    // A third gets no window: the grant beyond the budget serves it,
    // at once since no message holds it.
    assert_eq!(rank.asked(3, 0, m), vec![3]);
    assert!(!rank.is_waiting(&3));
    assert_eq!(rank.credit(&3), footprint(m));
    // A fourth waits: the budget is lent and the grant held.
    assert_eq!(rank.asked(4, 0, m), Vec::<u32>::new());
    assert!(rank.is_waiting(&4));
    // While it waits, every read halves the reader's window: once
    // channel 1 read past what it was lent, the budget has room.
    let mut served = false;
    for _ in 0..8 {
        if rank.consumed(&1, m).contains(&4) {
            served = true;
            break;
        }
    }
    assert!(served, "the waiting channel got a window");
    assert!(rank.lent() <= RANK_BUDGET);
    // An ask that the window covers once the worker reads needs
    // nothing, and the reads cover it.
    let mut rank: RankReceiver<u32> = RankReceiver::default();
    assert_eq!(rank.asked(1, 0, 100), vec![1], "covered already");
    let start = INITIAL_WINDOW - 50;
    assert_eq!(rank.asked(1, start, 100), Vec::<u32>::new());
    assert!(!rank.is_waiting(&1));
    assert_eq!(rank.consumed(&1, 1000), vec![1]);
    assert!(rank.credit(&1) >= start + footprint(100));
    assert_eq!(rank.lent(), 0);
}

// ----- building a message where the driver lent -----

/// A place lent for message 0 of `len` bytes: what the driver writes there.
struct Place(Vec<u8>);

impl Place {
    fn new(len: usize) -> Place {
        Place(vec![0; len])
    }

    fn write(&mut self, offset: u64, bytes: &[u8]) -> bool {
        let at = offset as usize;
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
        true
    }
}

#[test]
fn a_message_lent_mid_way_is_written_where_lent_in_any_order() {
    let big = message(3, 4 * CHUNK_BYTES + 7);
    let mut inb = Inbound::new();
    inb.raise_limit(footprint(big.len() as u64));
    assert_eq!(inb.lend(|_, _| true), None, "nothing is being built");
    // Chunks 0 and 3 arrive before the loan: held, and handed over with it.
    for i in [0, 3] {
        assert_eq!(
            inb.on_chunk(striped_chunk(0, &big, i)),
            Ok(Received::Partial)
        );
    }
    assert_eq!(inb.building(), Some(big.len() as u64));
    // A place that refuses a write is not lent.
    let mut writes = Vec::new();
    let refused = inb.lend(|offset, bytes| {
        writes.push((offset, bytes.len()));
        offset == 0
    });
    assert_eq!(refused, None);
    assert_eq!(
        writes,
        [(0, CHUNK_BYTES), (3 * CHUNK_BYTES as u64, CHUNK_BYTES)]
    );
    assert_eq!(inb.building(), Some(big.len() as u64), "still built here");
    let mut place = Place::new(big.len());
    let loan = inb
        .lend(|o, b| place.write(o, b))
        .expect("a message is being built");
    assert!(place.0[..CHUNK_BYTES] == big[..CHUNK_BYTES]);
    assert!(place.0[3 * CHUNK_BYTES..4 * CHUNK_BYTES] == big[3 * CHUNK_BYTES..4 * CHUNK_BYTES]);
    assert_eq!(inb.lent(), Some(loan));
    assert_eq!(inb.building(), None);
    assert_eq!(inb.buffered_bytes(), 0, "nothing of it is held here");
    // The rest, out of order and with chunks sent again, is written there.
    for i in [4, 1, 3, 0] {
        let chunk = striped_chunk(0, &big, i);
        assert_eq!(inb.on_chunk(chunk), Ok(Received::Lent { last: false }));
        place.write(chunk.offset, chunk.bytes);
    }
    let chunk = striped_chunk(0, &big, 2);
    assert_eq!(inb.on_chunk(chunk), Ok(Received::Lent { last: true }));
    place.write(chunk.offset, chunk.bytes);
    assert!(place.0 == big, "the message is whole where lent");
    assert_eq!((inb.next(), inb.lent()), (1, None));
    assert_eq!(inb.completed(), footprint(big.len() as u64));
}

#[test]
fn a_loan_given_back_leaves_the_message_to_be_built_here() {
    let big = message(9, 4 * CHUNK_BYTES + 7);
    let mut inb = Inbound::new();
    inb.raise_limit(footprint(big.len() as u64));
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 0)),
        Ok(Received::Partial)
    );
    let mut place = Place::new(big.len());
    let number = inb.lend(|o, b| place.write(o, b)).unwrap();
    for i in [3, 1] {
        let chunk = striped_chunk(0, &big, i);
        assert_eq!(inb.on_chunk(chunk), Ok(Received::Lent { last: false }));
        place.write(chunk.offset, chunk.bytes);
    }
    // Given back with its bytes up to the last written (chunk 3's end).
    let mut asked = None;
    let given = inb.give_back(number, |len| {
        asked = Some(len);
        Some(place.0[..len as usize].to_vec())
    });
    assert!(given);
    assert_eq!(
        asked,
        Some(4 * CHUNK_BYTES as u64),
        "not up to chunk 3's end"
    );
    assert_eq!(inb.lent(), None);
    assert_eq!(inb.buffered_bytes(), 3 * CHUNK_BYTES as u64);
    let stale = inb.give_back(number, |_| panic!("a loan no longer current is read"));
    assert!(stale);
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 2)),
        Ok(Received::Partial)
    );
    assert_eq!(inb.buffered_bytes(), 4 * CHUNK_BYTES as u64);
    // Lent again: everything arrived is handed over.
    let mut writes = Vec::new();
    let loan = inb
        .lend(|o, b| {
            writes.push((o, b.to_vec()));
            true
        })
        .unwrap();
    assert_ne!(loan, number);
    assert!(writes.len() == 1 && writes[0] == (0, big[..4 * CHUNK_BYTES].to_vec()));
    // Given back short of what was written: the message is dropped (the
    // driver ends the stream; the sender sends it again from its start).
    assert!(!inb.give_back(loan, |_| Some(big[..CHUNK_BYTES].to_vec())));
    assert_eq!(
        (inb.lent(), inb.building(), inb.buffered_bytes()),
        (None, None, 0)
    );
    for i in 0..4 {
        assert_eq!(
            inb.on_chunk(striped_chunk(0, &big, i)),
            Ok(Received::Partial)
        );
    }
    let last = inb.on_chunk(striped_chunk(0, &big, 4));
    assert!(
        last == Ok(Received::Complete(big.clone())),
        "sent again whole"
    );
}

#[test]
fn a_loan_ends_with_its_message_on_a_stream_lost_or_an_ask() {
    let big = message(2, 2 * CHUNK_BYTES);
    let mut inb = Inbound::new();
    inb.raise_limit(footprint(big.len() as u64));
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 0)),
        Ok(Received::Partial)
    );
    let loan = inb.lend(|_, _| true).unwrap();
    inb.stream_lost();
    assert_eq!(inb.lent(), None);
    assert!(inb.give_back(loan, |_| None), "changes nothing");
    assert_eq!(
        inb.on_chunk(striped_chunk(0, &big, 0)),
        Ok(Received::Partial)
    );
    inb.lend(|_, _| true).unwrap();
    let ask = Chunk {
        channel: CH,
        seq: 0,
        offset: 0,
        total: big.len() as u64,
        bytes: &[],
    };
    assert_eq!(
        inb.on_chunk(ask),
        Ok(Received::Asked {
            total: big.len() as u64
        })
    );
    assert_eq!(inb.lent(), None);
}
