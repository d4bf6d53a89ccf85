//! The conformance pack's media: real, minimal files — a 1×1 PNG and a short silent WAV —
//! as the suite's image and audio fixtures carry them (base64 in content blocks).

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// A valid 1×1 PNG: one opaque red pixel, 8-bit RGB, every chunk CRC correct.
#[rustfmt::skip]
pub(super) const PNG_1X1: &[u8] = &[
    // Signature.
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a,
    // IHDR: width 1, height 1, bit depth 8, colour type 2 (RGB), no interlace.
    0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00,
    0x90, 0x77, 0x53, 0xde,
    // IDAT: zlib stream of the single scanline [filter 0, 0xff, 0x00, 0x00].
    0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54,
    0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00,
    0xf7, 0x03, 0x41, 0x43,
    // IEND.
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// Sample rate of the fixture clip (mono, 16-bit PCM).
const WAV_SAMPLE_RATE: u32 = 8_000;
/// Number of samples in the fixture clip (1 ms of silence).
const WAV_SAMPLES: u32 = 8;

static PNG_BASE64: LazyLock<String> = LazyLock::new(|| STANDARD.encode(PNG_1X1));
pub(super) static WAV_BASE64: LazyLock<String> = LazyLock::new(|| STANDARD.encode(wav_bytes()));

/// A complete, valid WAV file: RIFF header, PCM `fmt ` chunk and `data` chunk of silence.
pub(super) fn wav_bytes() -> Vec<u8> {
    const CHANNELS: u16 = 1;
    const BITS: u16 = 16;
    let block_align = CHANNELS * BITS / 8;
    let data_len = WAV_SAMPLES * u32::from(block_align);
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    // The RIFF size counts everything after this field: "WAVE" + fmt chunk + data chunk.
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&CHANNELS.to_le_bytes());
    out.extend_from_slice(&WAV_SAMPLE_RATE.to_le_bytes());
    out.extend_from_slice(&(WAV_SAMPLE_RATE * u32::from(block_align)).to_le_bytes());
    out.extend_from_slice(&block_align.to_le_bytes());
    out.extend_from_slice(&BITS.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.resize(out.len() + data_len as usize, 0);
    out
}

/// An `image` content block carrying the fixture PNG.
pub(super) fn image_block() -> Value {
    json!({ "type": "image", "data": PNG_BASE64.as_str(), "mimeType": "image/png" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffff_u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn be32(bytes: &[u8]) -> u32 {
        u32::from_be_bytes(bytes.try_into().expect("4 bytes"))
    }

    fn le32(bytes: &[u8]) -> u32 {
        u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }

    #[test]
    fn png_and_wav_start_with_their_magic_numbers() {
        assert_eq!(&PNG_1X1[..8], b"\x89PNG\r\n\x1a\n");
        let wav = wav_bytes();
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..16], b"WAVEfmt ");
    }

    #[test]
    fn png_is_well_formed_with_correct_chunk_crcs() {
        let mut rest = &PNG_1X1[8..];
        let mut kinds = Vec::new();
        while !rest.is_empty() {
            let len = be32(&rest[..4]) as usize;
            let (kind_and_body, crc) = (&rest[4..8 + len], be32(&rest[8 + len..12 + len]));
            assert_eq!(crc32(kind_and_body), crc, "chunk {:?}", &kind_and_body[..4]);
            kinds.push(kind_and_body[..4].to_vec());
            rest = &rest[12 + len..];
        }
        assert_eq!(
            kinds,
            [b"IHDR".to_vec(), b"IDAT".to_vec(), b"IEND".to_vec()]
        );
        // IHDR: 1x1, 8-bit RGB.
        assert_eq!(&PNG_1X1[16..26], &[0, 0, 0, 1, 0, 0, 0, 1, 8, 2]);
    }

    #[test]
    fn wav_header_sizes_match_the_file() {
        let wav = wav_bytes();
        assert_eq!(le32(&wav[4..8]) as usize, wav.len() - 8);
        assert_eq!(le32(&wav[16..20]), 16, "PCM fmt chunk");
        assert_eq!(u16::from_le_bytes([wav[20], wav[21]]), 1, "PCM format tag");
        assert_eq!(le32(&wav[24..28]), WAV_SAMPLE_RATE);
        assert_eq!(&wav[36..40], b"data");
        assert_eq!(le32(&wav[40..44]) as usize, wav.len() - 44);
        assert_eq!(wav.len(), 44 + 2 * WAV_SAMPLES as usize);
    }
}
