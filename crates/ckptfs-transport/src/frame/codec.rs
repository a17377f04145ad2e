//! Encoding and the checked decoding of payloads and whole frames.

use super::*;

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// u16 length + UTF-8 bytes.
    fn str(&mut self, s: &str) {
        self.0.extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// Cuts a reason to [`MAX_REASON`] bytes at a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_REASON {
        return s;
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Checks the fields an encoder would otherwise send malformed (names, paths, sizes).
fn check_outgoing(msg: &Msg) -> Result<(), FrameError> {
    match msg {
        Msg::Hello(h) => {
            check_name("Hello.node_id", &h.node_id)?;
            check_name("Hello.server_id", &h.server_id)?;
            check_name("Hello.job", &h.job)
        }
        Msg::Challenge(c) => check_name("Challenge.node_id", &c.node_id),
        Msg::PutBegin(p) => {
            check_name("PutBegin.src_node", &p.src_node)?;
            check_path(&p.path)
        }
        Msg::Delete { path, .. } => check_path(path),
        Msg::List { src_node, after } => {
            check_name("List.src_node", src_node)?;
            if after.is_empty() {
                Ok(())
            } else {
                check_path(after)
            }
        }
        Msg::ListReply { entries, .. } => {
            if entries.len() > MAX_LIST_ENTRIES {
                return Err(FrameError::Malformed {
                    kind: "ListReply",
                    why: format!("{} entries, at most {MAX_LIST_ENTRIES}", entries.len()),
                });
            }
            entries.iter().try_for_each(|e| check_path(&e.path))
        }
        Msg::Get { src_node, path } => {
            check_name("Get.src_node", src_node)?;
            check_path(path)
        }
        Msg::SegPiece(p) => {
            check_name("SegPiece.src_node", &p.src_node)?;
            check_name("SegPiece.set", &p.set)?;
            check_name_max("SegPiece.dataset", &p.dataset, MAX_KEY)?;
            check_piece(p)
        }
        _ => Ok(()),
    }
}

/// Encodes a message's payload (for a Chunk: only the fixed part, without data).
pub fn encode_payload(msg: &Msg) -> Result<Vec<u8>, FrameError> {
    check_outgoing(msg)?;
    let mut w = W(Vec::with_capacity(64));
    match msg {
        Msg::Hello(h) => {
            w.str(&h.node_id);
            w.str(&h.server_id);
            w.str(&h.job);
            w.bytes(&h.nonce);
            w.u8(h.mode);
        }
        Msg::Challenge(c) => {
            w.str(&c.node_id);
            w.bytes(&c.nonce);
        }
        Msg::Response { mac } | Msg::AuthOk { mac } => w.bytes(mac),
        Msg::Bye => {}
        Msg::Heartbeat { seq, unix_ms } => {
            w.u64(*seq);
            w.u64(*unix_ms);
        }
        Msg::PutBegin(p) => {
            w.u64(p.generation);
            w.u64(p.size);
            w.i64(p.mtime_ns);
            w.u32(p.chunk_size);
            w.str(&p.src_node);
            w.str(&p.path);
        }
        Msg::Chunk(c) => {
            w.u64(c.index);
            w.u64(c.offset);
            w.u32(c.len);
            w.u32(c.crc32c);
        }
        Msg::PutEnd(e) => {
            w.u64(e.generation);
            w.u64(e.chunks);
            w.u64(e.size);
        }
        Msg::Ack { tag } => w.u64(*tag),
        Msg::Nack(n) => {
            w.u64(n.tag);
            w.i32(n.errno);
            w.str(cut(&n.reason));
        }
        Msg::Delete { path, generation } => {
            w.u64(*generation);
            w.str(path);
        }
        Msg::List { src_node, after } => {
            w.str(src_node);
            w.str(after);
        }
        Msg::ListReply { entries, more } => {
            w.u8(*more as u8);
            w.u32(entries.len() as u32);
            for e in entries {
                w.u64(e.size);
                w.i64(e.mtime_ns);
                w.u64(e.generation);
                w.u8(e.complete as u8);
                w.u8(e.crc32c.is_some() as u8);
                w.u32(e.crc32c.unwrap_or(0));
                w.str(&e.path);
            }
        }
        Msg::Get { src_node, path } => {
            w.str(src_node);
            w.str(path);
        }
        Msg::Error { errno, reason } => {
            w.i32(*errno);
            w.str(cut(reason));
        }
        Msg::Query { body } | Msg::QueryReply { body } | Msg::Erasure { body } => {
            w.u32(body.len().min(u32::MAX as usize) as u32);
            w.bytes(body.as_bytes());
        }
        Msg::SegPiece(p) => {
            w.u64(p.epoch);
            w.u32(p.stripe);
            w.0.extend_from_slice(&p.row.to_le_bytes());
            w.u8(p.kind as u8);
            w.u64(p.offset);
            w.u32(p.len);
            w.u64(p.seg_size);
            w.str(&p.src_node);
            w.str(&p.set);
            w.str(&p.dataset);
        }
    }
    let max = max_payload(msg.kind(), u32::MAX);
    if w.0.len() > max as usize {
        return Err(FrameError::TooLong {
            kind: msg.kind(),
            len: w.0.len().min(u32::MAX as usize) as u32,
            max,
        });
    }
    Ok(w.0)
}

/// Header plus payload of a message; for a Chunk the header's length includes the
/// `data_len` data bytes the caller sends right after (one `writev`).
pub fn encode_head(msg: &Msg) -> Result<Vec<u8>, FrameError> {
    let payload = encode_payload(msg)?;
    let data_len = match msg {
        Msg::Chunk(c) => c.len as usize,
        _ => 0,
    };
    let len = payload.len() + data_len;
    let len = u32::try_from(len).map_err(|_| FrameError::TooLong {
        kind: msg.kind(),
        len: u32::MAX,
        max: max_payload(msg.kind(), DEFAULT_MAX_CHUNK),
    })?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_header(msg.kind(), len));
    out.extend_from_slice(&payload);
    Ok(out)
}

/// A whole frame in one buffer (tests, small messages): the head plus `data` for a
/// Chunk (whose `len` must equal `data.len()`).
pub fn encode_frame(msg: &Msg, data: &[u8]) -> Result<Vec<u8>, FrameError> {
    let expect = match msg {
        Msg::Chunk(c) => c.len as usize,
        _ => 0,
    };
    if data.len() != expect {
        return Err(FrameError::Malformed {
            kind: "Chunk",
            why: format!("{} data bytes for a length of {expect}", data.len()),
        });
    }
    let mut out = encode_head(msg)?;
    out.extend_from_slice(data);
    Ok(out)
}

struct R<'a> {
    b: &'a [u8],
    kind: &'static str,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.b.len() < n {
            return Err(FrameError::Malformed {
                kind: self.kind,
                why: "payload ends early".into(),
            });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("flag byte {v} is neither 0 nor 1"),
            }),
        }
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn i32(&mut self) -> Result<i32, FrameError> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Result<i64, FrameError> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    fn str(&mut self, max: usize) -> Result<String, FrameError> {
        let n = u16::from_le_bytes(self.arr()?) as usize;
        if n > max {
            return Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("string of {n} bytes, at most {max}"),
            });
        }
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| FrameError::Malformed {
                kind: self.kind,
                why: "string is not UTF-8".into(),
            })
    }
    fn name(&mut self, what: &'static str) -> Result<String, FrameError> {
        let s = self.str(MAX_NAME)?;
        check_name(what, &s)?;
        Ok(s)
    }
    fn path(&mut self) -> Result<String, FrameError> {
        let s = self.str(MAX_PATH)?;
        check_path(&s)?;
        Ok(s)
    }
    fn end(&self) -> Result<(), FrameError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("{} bytes after the last field", self.b.len()),
            })
        }
    }
}

/// Decodes a payload of type `kind`. For a Chunk, `payload` is only the fixed part
/// ([`CHUNK_FIXED`] bytes); the caller reads the data separately.
pub fn decode_payload(kind: MsgType, payload: &[u8]) -> Result<Msg, FrameError> {
    let name: &'static str = match kind {
        MsgType::Hello => "Hello",
        MsgType::Challenge => "Challenge",
        MsgType::Response => "Response",
        MsgType::AuthOk => "AuthOk",
        MsgType::Heartbeat => "Heartbeat",
        MsgType::PutBegin => "PutBegin",
        MsgType::Chunk => "Chunk",
        MsgType::PutEnd => "PutEnd",
        MsgType::Ack => "Ack",
        MsgType::Nack => "Nack",
        MsgType::Delete => "Delete",
        MsgType::List => "List",
        MsgType::ListReply => "ListReply",
        MsgType::Get => "Get",
        MsgType::Error => "Error",
        MsgType::Bye => "Bye",
        MsgType::Query => "Query",
        MsgType::QueryReply => "QueryReply",
        MsgType::SegPiece => "SegPiece",
        MsgType::Erasure => "Erasure",
    };
    let mut r = R {
        b: payload,
        kind: name,
    };
    let msg = match kind {
        MsgType::Hello => Msg::Hello(Hello {
            node_id: r.name("Hello.node_id")?,
            server_id: r.name("Hello.server_id")?,
            job: r.name("Hello.job")?,
            nonce: r.arr()?,
            mode: r.u8()?,
        }),
        MsgType::Challenge => Msg::Challenge(Challenge {
            node_id: r.name("Challenge.node_id")?,
            nonce: r.arr()?,
        }),
        MsgType::Response => Msg::Response { mac: r.arr()? },
        MsgType::AuthOk => Msg::AuthOk { mac: r.arr()? },
        MsgType::Bye => Msg::Bye,
        MsgType::Heartbeat => Msg::Heartbeat {
            seq: r.u64()?,
            unix_ms: r.u64()?,
        },
        MsgType::PutBegin => {
            let generation = r.u64()?;
            let size = r.u64()?;
            let mtime_ns = r.i64()?;
            let chunk_size = r.u32()?;
            Msg::PutBegin(PutBegin {
                src_node: r.name("PutBegin.src_node")?,
                path: r.path()?,
                size,
                chunk_size,
                mtime_ns,
                generation,
            })
        }
        MsgType::Chunk => Msg::Chunk(chunk_fields(&mut r)?),
        MsgType::PutEnd => Msg::PutEnd(PutEnd {
            generation: r.u64()?,
            chunks: r.u64()?,
            size: r.u64()?,
        }),
        MsgType::Ack => Msg::Ack { tag: r.u64()? },
        MsgType::Nack => Msg::Nack(Nack {
            tag: r.u64()?,
            errno: r.i32()?,
            reason: r.str(MAX_REASON)?,
        }),
        MsgType::Delete => {
            let generation = r.u64()?;
            Msg::Delete {
                path: r.path()?,
                generation,
            }
        }
        MsgType::List => {
            let src_node = r.name("List.src_node")?;
            let after = r.str(MAX_PATH)?;
            if !after.is_empty() {
                check_path(&after)?;
            }
            Msg::List { src_node, after }
        }
        MsgType::ListReply => {
            let more = r.bool()?;
            let n = r.u32()? as usize;
            // Each entry takes at least 32 bytes: bound the count by what is left
            // before allocating for it.
            if n > MAX_LIST_ENTRIES || n.saturating_mul(32) > r.b.len() {
                return Err(FrameError::Malformed {
                    kind: "ListReply",
                    why: format!("{n} entries do not fit in the payload"),
                });
            }
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let size = r.u64()?;
                let mtime_ns = r.i64()?;
                let generation = r.u64()?;
                let complete = r.bool()?;
                let known = r.bool()?;
                let crc = r.u32()?;
                if !known && crc != 0 {
                    // Canonical form: an unknown CRC is sent as 0.
                    return Err(FrameError::Malformed {
                        kind: "ListReply",
                        why: "a CRC32C marked unknown is not 0".into(),
                    });
                }
                entries.push(ListEntry {
                    path: r.path()?,
                    size,
                    mtime_ns,
                    generation,
                    complete,
                    crc32c: known.then_some(crc),
                });
            }
            Msg::ListReply { entries, more }
        }
        MsgType::Get => Msg::Get {
            src_node: r.name("Get.src_node")?,
            path: r.path()?,
        },
        MsgType::Error => Msg::Error {
            errno: r.i32()?,
            reason: r.str(MAX_REASON)?,
        },
        MsgType::SegPiece => {
            let epoch = r.u64()?;
            let stripe = r.u32()?;
            let row = u16::from_le_bytes(r.arr()?);
            let k = r.u8()?;
            let kind = SegKind::from_u8(k).ok_or_else(|| FrameError::Malformed {
                kind: "SegPiece",
                why: format!("unknown segment kind {k}"),
            })?;
            let offset = r.u64()?;
            let len = r.u32()?;
            let seg_size = r.u64()?;
            let p = SegPiece {
                src_node: r.name("SegPiece.src_node")?,
                set: r.name("SegPiece.set")?,
                dataset: {
                    let s = r.str(MAX_KEY)?;
                    check_name_max("SegPiece.dataset", &s, MAX_KEY)?;
                    s
                },
                epoch,
                stripe,
                row,
                kind,
                offset,
                len,
                seg_size,
            };
            check_piece(&p)?;
            Msg::SegPiece(p)
        }
        MsgType::Query | MsgType::QueryReply | MsgType::Erasure => {
            let n = r.u32()? as usize;
            let b = r.take(n)?;
            let body = std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| FrameError::Malformed {
                    kind: name,
                    why: "body is not UTF-8".into(),
                })?;
            match kind {
                MsgType::Query => Msg::Query { body },
                MsgType::QueryReply => Msg::QueryReply { body },
                _ => Msg::Erasure { body },
            }
        }
    };
    r.end()?;
    Ok(msg)
}

/// A decoded frame: the message, its chunk data (empty unless a Chunk), bytes used.
pub type DecodedFrame<'a> = (Msg, &'a [u8], usize);

/// Decodes one whole frame from the front of `buf`: the message, its chunk data (empty
/// unless a Chunk, whose CRC32C is verified), and the number of bytes used.
/// `Ok(None)` when `buf` holds only part of a frame that is valid so far.
pub fn decode_frame(buf: &[u8], max_chunk: u32) -> Result<Option<DecodedFrame<'_>>, FrameError> {
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut hb = [0u8; HEADER_LEN];
    hb.copy_from_slice(h);
    let hdr = decode_header(&hb, max_chunk)?;
    let total = HEADER_LEN + hdr.len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    if hdr.kind == MsgType::Chunk {
        let (fixed, data) = payload.split_at(CHUNK_FIXED);
        let c = decode_chunk_fixed(fixed)?;
        check_chunk(&c, hdr.len)?;
        if crate::crc32c(data) != c.crc32c {
            return Err(FrameError::ChunkCrc { index: c.index });
        }
        return Ok(Some((Msg::Chunk(c), data, total)));
    }
    Ok(Some((decode_payload(hdr.kind, payload)?, &[], total)))
}

fn chunk_fields(r: &mut R<'_>) -> Result<ChunkHeader, FrameError> {
    Ok(ChunkHeader {
        index: r.u64()?,
        offset: r.u64()?,
        len: r.u32()?,
        crc32c: r.u32()?,
    })
}

/// A piece must lie inside its segment and carry data (checked on both sides).
fn check_piece(p: &SegPiece) -> Result<(), FrameError> {
    let end = p.offset.checked_add(p.len as u64);
    if p.len == 0 || end.is_none_or(|e| e > p.seg_size) {
        return Err(FrameError::Malformed {
            kind: "SegPiece",
            why: format!(
                "piece of {} bytes at {} does not lie inside a segment of {}",
                p.len, p.offset, p.seg_size
            ),
        });
    }
    Ok(())
}

/// Decodes the fixed part of a chunk frame's payload ([`CHUNK_FIXED`] bytes).
pub fn decode_chunk_fixed(b: &[u8]) -> Result<ChunkHeader, FrameError> {
    let mut r = R { b, kind: "Chunk" };
    let c = chunk_fields(&mut r)?;
    r.end()?;
    Ok(c)
}

/// Checks that a chunk header's data length agrees with its frame's payload length.
pub fn check_chunk(c: &ChunkHeader, frame_len: u32) -> Result<(), FrameError> {
    if c.len as usize + CHUNK_FIXED != frame_len as usize {
        return Err(FrameError::Malformed {
            kind: "Chunk",
            why: format!(
                "data length {} disagrees with the frame's {} payload bytes",
                c.len, frame_len
            ),
        });
    }
    Ok(())
}
