//! The protobuf wire format: a bounds-checked cursor over varints,
//! length-delimited fields and keys, and why a body could not be read.

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtobufError {
    #[error("the protobuf body is truncated or malformed")]
    Malformed,
    #[error("the protobuf body lacks the k8s envelope")]
    NoEnvelope,
    #[error("protobuf is not supported for {0}; send JSON")]
    UnsupportedKind(String),
    #[error("unsupported protobuf field {field} in {message}; send JSON")]
    UnknownField { message: &'static str, field: u64 },
}

/// A cursor over protobuf wire bytes; every read is bounds-checked.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or(ProtobufError::Malformed)?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtobufError::Malformed)
    }

    pub(super) fn bytes(&mut self) -> Result<&'a [u8], ProtobufError> {
        let n = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Malformed)?;
        if n > self.buf.len() {
            return Err(ProtobufError::Malformed);
        }
        let (b, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(b)
    }

    /// Next (field number, wire type), or None at the end.
    pub(super) fn key(&mut self) -> Result<Option<(u64, u64)>, ProtobufError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let k = self.varint()?;
        Ok(Some((k >> 3, k & 7)))
    }

    pub(super) fn skip(&mut self, wire: u64) -> Result<(), ProtobufError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.take(8),
            2 => self.bytes().map(drop),
            5 => self.take(4),
            _ => Err(ProtobufError::Malformed),
        }
    }

    fn take(&mut self, n: usize) -> Result<(), ProtobufError> {
        if n > self.buf.len() {
            return Err(ProtobufError::Malformed);
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

pub(super) fn string(b: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtobufError::Malformed)
}
