"""SecAgg+'s masks from a cryptographic generator keyed by the whole secret.

Flower's ``secaggplus_utils.pseudo_rand_gen`` (1.41 and 1.42) XOR-folds the key material to a 32-bit seed and expands
it with NumPy's Mersenne Twister: the ECDH pairwise key is base64 text, so at most 2²⁸ seeds, and a server that
holds a client's masked vector, its private mask (from the unmask shares) and its public weight finds the pairwise
seed by a scan and reads the client's vector (flwrlabs/flower issue #7522; PR #7570, a SHA-256 counter-mode PRF,
open). ``mask_arrays`` has Flower's signature and replaces it on both ends (``fedgca.flower.masks``): the 256-bit
AES key is SHA-256 of a domain tag and the *whole* secret (Flower's 44-byte pairwise key, its 32-byte private seed),
and the masks are AES-256 in counter mode over zero bytes, read as little-endian uint64 and reduced modulo the
power-of-two ``num_range`` — exactly uniform, no bias. One key stream per secret: every array of a vector takes the
next values of the same stream, so no two masks of one secret overlap. Standard primitives only (``hashlib`` and
``cryptography``, which Flower already needs); no new cipher.
"""
from __future__ import annotations

import hashlib

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

NAME = "aes256-ctr(sha256(secret))/v1"  # what a node announces and the server requires (fedgca.flower.masks)
_DOMAIN = b"fedgca/secagg+/mask/v1\x00"
_NONCE = bytes(16)  # one key per secret, used for one stream: a fixed counter block is safe


def mask_key(seed: bytes) -> bytes:
    """The AES-256 key of a secret: SHA-256 over the domain tag, the secret's length and every byte of it."""
    seed = bytes(seed)
    return hashlib.sha256(_DOMAIN + len(seed).to_bytes(4, "little") + seed).digest()


def mask_arrays(seed: bytes, num_range: int, dimensions_list: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Uniform int64 masks in [0, num_range) of the given shapes, from the secret ``seed`` (Flower's signature)."""
    num_range = int(num_range)
    if num_range < 2 or num_range & (num_range - 1) or num_range > 2 ** 63:
        raise ValueError(f"the mask range must be a power of two in [2, 2^63], got {num_range}")
    sizes = [int(np.prod(d, dtype=np.int64)) for d in dimensions_list]
    stream = Cipher(algorithms.AES(mask_key(seed)), modes.CTR(_NONCE)).encryptor().update(bytes(8 * sum(sizes)))
    words = (np.frombuffer(stream, dtype="<u8") & np.uint64(num_range - 1)).astype(np.int64)
    out, at = [], 0
    for dims, n in zip(dimensions_list, sizes):
        chunk = words[at:at + n]
        at += n
        out.append(np.array(chunk[0], dtype=np.int64) if len(dims) == 0 else chunk.reshape(dims))
    return out
