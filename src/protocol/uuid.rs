//! Random identifiers in the UUID version 4 form (RFC 9562): request ids and
//! hosted ticket ids.

/// `random` laid out as a UUID version 4 in its hyphenated form.
pub fn uuid_v4(random: u128) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = random.to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut text = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    text
}

/// A fresh random UUID version 4, as text.
pub fn random_uuid() -> String {
    // Hex digits and hyphens only: always ASCII.
    String::from_utf8_lossy(&uuid_v4(rand::random())).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_4_uuids() {
        let text = uuid_v4(u128::MAX);
        assert_eq!(&text, b"ffffffff-ffff-4fff-bfff-ffffffffffff");
        let text = uuid_v4(0);
        assert_eq!(&text, b"00000000-0000-4000-8000-000000000000");
        let fresh = random_uuid();
        assert_eq!((fresh.len(), &fresh[14..15]), (36, "4"));
        assert_ne!(fresh, random_uuid());
    }
}
