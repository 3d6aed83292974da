#ifndef COPENSSLCRYPTO_SHIM_H
#define COPENSSLCRYPTO_SHIM_H
// OpenSSL's libcrypto, for one thing: the secure channel's ChaCha20-Poly1305 records, sealed and
// opened in place (swift-crypto's ChaChaPoly copies each record twice more; see
// Sources/SecureChannel/RecordCipher.swift).
#include <openssl/evp.h>
#endif
