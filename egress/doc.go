// Package egress is the mechanism behind egress allowlists: an HTTP
// forward proxy that hookbox runs on the host, whose listening socket lives
// inside a container's network namespace (internal/nsnet) and which dials
// upstream from the host's namespace. The container has only loopback, so
// a program that ignores the proxy variables has no route at all; one that
// uses the proxy reaches what the Policy allows and nothing else.
//
// The same Proxy can also serve model-API gateways (ServeGateway, below):
// plain-HTTP reverse proxies, listening in the same namespace, that send
// each request on to one provider over TLS with the real API key in it,
// so that the key never enters the container.
//
// egress records, it does not judge runs: it knows nothing of renders,
// containers or run records. The launcher builds the Policy, opens the
// listeners, calls Serve (and ServeGateway), and writes what
// Options.Record and Stats report (network.jsonl, events, result.json).
//
// # What a request must be
//
// The proxy speaks HTTP/1.1 to clients and accepts two kinds of request:
//
//   - CONNECT host:port, for TLS or cleartext HTTP/1.x. The policy decides
//     on the requested host before anything is resolved. Once the proxy
//     has dialled a checked address it answers 200, then reads and checks
//     the tunnel's first message (below) before one byte goes upstream;
//     only then are the bytes read replayed upstream, unchanged, and the
//     tunnel copies both ways (splice on Linux).
//   - An absolute-form request (GET http://host:port/path), plain HTTP.
//     Each request of a kept-alive connection is judged on its own; the
//     first refusal ends the connection. A Host field, when present, must
//     name the request line's destination. Hop-by-hop fields (Connection
//     and what it lists, Proxy-Connection, Proxy-Authorization,
//     Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade) are not
//     forwarded, so there is no protocol upgrade over this path.
//
// Anything else is refused: origin-form requests (no absolute URL), other
// schemes (https:// must use CONNECT), unparsable requests.
//
// # A tunnel's first message
//
// The whole first message must arrive within HeaderTimeout of the 200.
// Its first byte decides what it must be:
//
//   - A byte that cannot start an HTTP method (a TLS record starts with 20
//     to 24): a TLS ClientHello carrying a server name (SNI) equal to the
//     CONNECT host, case-insensitively. For an ip rule the ClientHello must
//     carry no server name (TLS clients send none for an IP address) or the
//     address itself. The ClientHello is parsed by crypto/tls itself (a
//     tls.Server over a connection that records what it reads and discards
//     what it would write, stopped from GetConfigForClient), not by a
//     parser of this package.
//   - A token character, which can start a method: a cleartext HTTP/1.x
//     request head. Some clients tunnel http:// through CONNECT too (Node's
//     undici, so Node's fetch behind a proxy agent). The head is peeked at,
//     not consumed, and parsed by net/http (http.ReadRequest over a copy),
//     bounded like a proxy request's head (64 KiB, HeaderTimeout); its
//     request line is parsed as soon as it is whole, so another protocol
//     whose client speaks first is refused at once. The request must name
//     the CONNECT host and port: its Host field, and its target when that is
//     absolute-form (http:// only), are each compared when present, and one
//     of them must be; two Host fields are refused. Names compare
//     case-insensitively without one trailing dot, addresses in canonical
//     form (an ip destination must be named by its address, not a name), a
//     port given must be the CONNECT's, and a missing port means 80, the
//     http scheme's default: "Host: api.example.com" matches only a CONNECT
//     to api.example.com:80. Authority-form (a CONNECT inside the tunnel)
//     and other schemes are refused, and so is the HTTP/2 cleartext preface
//     (not HTTP/1.x).
//
// Anything else, a message naming another server or none, and a client
// that stalls are refused, and nothing reaches the destination. Only the
// first message is checked: as with the TLS records after a ClientHello,
// the requests after the first on a cleartext tunnel are not parsed (they
// go to the destination the CONNECT fixed, whatever their Host fields say),
// nor is a protocol the first request upgrades to.
//
// # Names, addresses, and the order of decisions
//
//  1. The host is normalized: a DNS name is lowercased with one trailing
//     dot dropped; an IPv4-mapped IPv6 literal is its IPv4 address; a name
//     whose last label is numeric ("127.1") is unparsable, not a name.
//  2. A name must match a KindName rule (exactly) or a KindWildcard rule
//     ("*.example.com": one or more labels in front of the suffix, never
//     the suffix itself) on the requested port, or it is refused without
//     any lookup. An IP literal must match a KindIP rule with that exact
//     address and port: the address an allowed name resolves to is not
//     allowed as a literal.
//  3. The proxy resolves an allowed name itself. Addresses that are not
//     on the public internet are dropped unless that exact address and
//     port is a KindIP rule: unspecified and 0.0.0.0/8, loopback,
//     link-local (169.254.0.0/16 with cloud metadata, fe80::/10), private
//     (10/8, 172.16/12, 192.168/16), unique-local fc00::/7, carrier-grade
//     NAT 100.64.0.0/10 (refused: cloud providers run internal services
//     there), multicast, reserved and broadcast 240/4, documentation and
//     benchmarking ranges, deprecated IPv4-compatible and site-local IPv6,
//     and NAT64 or 6to4 addresses that embed any of these. If no address
//     remains the request is refused.
//  4. It dials the remaining addresses in order, each exactly as checked:
//     nothing is resolved again, so there is no DNS rebinding window.
//
// # Failing closed
//
// Every refusal the client can still be told about is an HTTP response:
// a status (400, 403, 408, 431, 502, 503, 504), the header
// X-Hookbox-Refused: <reason id> and a one-line body, then the connection
// closes. A CONNECT refused after its 200 cannot be answered as the
// CONNECT: an SNI refusal is a TLS access_denied alert (what a TLS client
// shows as "access denied"); a cleartext request, or plain bytes, get the
// HTTP refusal inside the tunnel (what a client speaking HTTP there
// reads: 403 for not-tls and host-mismatch, 408, 431 or 400 for a head
// that stalls, is too large or is cut short); a client that sent nothing,
// or stalled inside a ClientHello, is closed. No refusal leaves a tunnel
// open.
//
// # Reason ids
//
// Refused:
//
//   - not-allowed: no name or wildcard rule for host:port (403).
//   - ip-literal-not-allowed: an IP address without an ip rule for exactly
//     it (403).
//   - resolves-to-private: every address of an allowed name is internal
//     (step 3) and none is an ip rule (403).
//   - resolve-failed: the lookup failed or found nothing (502; 504 when it
//     timed out).
//   - dial-failed: no checked address accepted the connection (502).
//   - dial-timeout: no checked address answered within DialTimeout (504).
//   - malformed-request: unparsable request, target, port or host (400);
//     in a tunnel, a client that closed inside its first request head.
//   - headers-too-large: a request head over 64 KiB (431), a proxy
//     request's or the first one in a cleartext tunnel.
//   - header-timeout: no complete request head within HeaderTimeout
//     (408), a proxy request's or the first one in a cleartext tunnel.
//   - host-header-mismatch: the Host field names another destination than
//     the request line (400).
//   - origin-form-request: a request without an absolute URL (400).
//   - unsupported-scheme: an absolute URL that is not http:// (400).
//   - too-many-connections: beyond MaxConns concurrent connections (503).
//   - gateway-path-refused: a gateway request whose path is outside its
//     route's prefixes or not plain (below) (403).
//   - not-tls: the bytes after a CONNECT's 200 are neither a TLS
//     ClientHello nor an HTTP/1.x request head.
//   - no-client-hello: the client closed or stalled (HeaderTimeout) before
//     its first byte, or inside a ClientHello.
//   - no-sni: a ClientHello without a server name, for a name.
//   - sni-mismatch: the server name is not the CONNECT host (for an ip
//     destination: any name but the address).
//   - host-mismatch: the cleartext request in a tunnel does not name the
//     CONNECT host and port (its Host field, or its absolute-form target),
//     names none, or has two Host fields.
//
// Each attempt that is a CONNECT says what its tunnel carried once its
// first message was recognized: tunnel "tls" or "http" (Attempt.Tunnel).
//
// Allowed, but failed (502 with X-Hookbox-Error, not X-Hookbox-Refused):
// upstream-failed, when the destination broke a forwarded or gateway
// request or a tunnel's first write; upstream-tls-failed, when a gateway's
// upstream did not complete TLS (its certificate did not verify for the
// upstream's host, or the handshake broke or took over DialTimeout).
//
// # Limits
//
// MaxConns client connections are handled at once; one more is read for at
// most a second (to record what it asked) and answered 503; beyond twice
// MaxConns a connection is answered 503 unread and closed (its client may
// see a reset instead), still recorded. A request head, and a tunnel's
// first message (from the 200), must complete within HeaderTimeout. A
// tunnel or kept-alive connection on which no byte moved either way for
// IdleTimeout (detected within twice that) is closed; once one direction
// of a tunnel has ended (and was half-closed onward), the other is closed
// after HeaderTimeout of silence.
//
// # What is defended, and what is not
//
// Defended: reaching any destination, name or address, that the policy
// does not name; reaching the host, its networks or a cloud's metadata
// service through a name that resolves there; DNS rebinding between check
// and dial; tunnelling a protocol other than TLS or HTTP/1.x, another TLS
// server name, or a first cleartext request for another host through an
// allowed CONNECT (domain fronting by SNI or Host); smuggling a second
// destination on a kept-alive connection or through a Host field;
// exhausting the host by connections or slow clients.
//
// Not defended:
//
//   - An allowed destination is trusted with whatever the agent sends it.
//     The proxy does not inspect TLS content, nor a cleartext tunnel past
//     its first request head: data can leave to an allowed host, and a
//     host that relays (a CDN with domain fronting by Host header inside
//     TLS or in a later request of a cleartext tunnel, a service that
//     fetches URLs for its callers) can carry it further.
//   - A wildcard allows every name under its suffix, including names the
//     suffix's owner lets others create.
//   - Encrypted Client Hello hides the real server name: the outer name is
//     what is compared, so such a client is refused unless that is the
//     CONNECT host.
//   - DNS itself: a lookup of an allowed name leaves from the host, and the
//     host's resolver is trusted.
//   - A peer that stops reading while the other keeps writing holds its
//     connection slot until the other direction idles out or Close.
//
// The proxy itself handles no credentials; only a gateway does.
//
// # Gateway
//
// ServeGateway serves one GatewayRoute (a provider: name, https upstream
// URL, path prefixes, the header field and prefix of its credential, the
// credential) on a listener of its own, for example 127.0.0.1:3129 inside
// the container. The engine is pointed at it as its base URL
// (http://127.0.0.1:3129) with a placeholder key, and speaks plain
// HTTP/1.1 to it, kept alive.
//
// For each request, in order:
//
//  1. The request must be origin-form (POST /v1/messages?beta=true):
//     absolute-form, CONNECT and "*" are malformed-request (400). Its
//     Host field is ignored.
//  2. Its path, as sent, must be plain and start with one of the route's
//     PathPrefixes, or it is gateway-path-refused (403). Plain means no
//     segment, percent-decoded, is a dot segment ("." or "..", also
//     before a ";" parameter) or holds "/", "\" or a control byte: then
//     every server reads the same segments, and a prefix of the path is a
//     prefix of what the upstream serves.
//  3. Every "key" parameter (the form of a Gemini key in a URL) is
//     dropped from the query; the others go on as sent.
//  4. The upstream's host and port are judged like any destination of
//     the proxy (names before any lookup, internal addresses only by an ip
//     rule) and dialled only at the checked addresses: the gateway does
//     not bypass the Policy, so the caller lists the upstream in it.
//  5. Over that connection, TLS with the upstream's host as server name,
//     verified against Options.GatewayTLS's roots (default the system's):
//     an IP-literal upstream must have the address among its certificate's
//     IP SANs. Nothing of a request is written before the handshake
//     succeeds; a failure is upstream-tls-failed. HTTP/1.1 only; upstream
//     connections are pooled and kept alive.
//  6. The request goes to the upstream's path followed by the request's
//     ("https://api.openai.com/v1" with /responses is /v1/responses), with
//     Host the upstream's. The engine's hop-by-hop fields are dropped as
//     the proxy drops them, and so are Expect (the gateway answers 100
//     Continue itself) and every field an engine puts a key in:
//     Authorization, Proxy-Authorization, X-Api-Key, X-Goog-Api-Key,
//     Api-Key and the route's Header, names compared case-insensitively
//     with "_" read as "-". Then Header is set to Prefix+Credential, its
//     only value.
//  7. The request body streams upstream as it arrives, and the response
//     streams back as it arrives (each read is written and flushed, so
//     server-sent events are not held back), status and end-to-end fields
//     unchanged.
//
// A refusal ends the connection, as the proxy's do. Each request is one
// Attempt: Gateway (the route's name), Host and Port (the upstream's),
// Method, Path (as sent, never the query), Status, body bytes each way.
// MaxConns, HeaderTimeout, IdleTimeout and DialTimeout apply as to the
// proxy, and MaxConns counts the proxy's connections and the gateways'
// together; Close ends both.
//
// The credential is never logged, recorded, nor put in an error, a
// refusal or a description of the route (GatewayRoute.String). Route
// errors do not show it, nor an upstream URL's user information or query.
//
// What the gateway defends: the key itself. It never enters the
// container, so nothing the agent runs can read it, print it, or carry it
// out to use after the run or from elsewhere. Nor does the engine's
// placeholder reach the provider in the fields and the query parameter
// above.
//
// What it does not:
//
//   - The key's authority, while the run lasts: the agent (through the
//     engine, or by speaking to the gateway itself) can send any request
//     under the route's prefixes and have it made with the real key:
//     other models, other endpoints under the prefix, bulk use, whatever
//     the provider lets that key do. Only the allowlist (one upstream per
//     route), the prefixes and the limits bound it; the records show what
//     was asked.
//   - Responses are not inspected: a provider that echoed the key in a
//     response would hand it to the engine (the gateway relies on the
//     providers' not doing so).
//   - Listing the upstream in the Policy also lets the proxy tunnel to it
//     (CONNECT), with whatever key the engine has, which is the
//     placeholder.
//   - The credential is in this process's memory, and the host's TLS roots
//     are trusted.
package egress
