"""Read pcap and pcapng captures into columnar packet tables.

`read_capture(path)` returns a `Capture`: the packet, flow, SACK and UDP tables of the schemas in
tracekit.schema (docs/tables.md), and `ReadStats`.

- Files: classic pcap (microsecond or nanosecond timestamps, either byte order) and pcapng
  (sections of either byte order, several interfaces, if_tsresol and if_tsoffset, Enhanced,
  Simple and obsolete Packet Blocks; other blocks are skipped). gzip, xz and zstd compression is
  told by magic bytes, never by the name.
- Link types: Ethernet with any number of 802.1Q/802.1ad tags, E-tags, VN-tags, Cisco
  FabricPath, 802.1ah, MPLS label stacks, PPPoE sessions and 802.3 lengths with LLC/SNAP, Linux
  cooked v1 and v2, raw IP (101, 12, 14, 228, 229), BSD loopback (0), OpenBSD loopback (108), PPP
  (9, 50; carrying IP or MPLS, or Cisco HDLC), Cisco HDLC (104), FDDI (10), MPLS (219), ARCNET
  (7, 129), 802.11 data frames (105, and behind radiotap 127 or PPI 192; an A-MSDU's subframes
  each a packet, its rows sharing the frame's number and time), Juniper Ethernet (178),
  NFLOG (239) and IPoIB (242); the packet inside IP-in-IP, GRE (with ERSPAN, WCCP's redirect
  header or Aruba's 802.11 frames), GRE in UDP, VXLAN, Geneve, GTP-U, AYIYA and L2TP (version 2,
  PPP) tunnels.
- IPv4 and IPv6 (extension headers and IPsec AH skipped); TCP with MSS, window scale,
  SACK-permitted, SACK blocks (up to 4) and timestamps; UDP with its first 8 payload bytes. Payload
  lengths come from the IP header, so snaplen-cut frames are exact, but never run past the frame's
  original length (a whole frame counts what it holds, as tshark does); a zero IP length (Linux BIG
  TCP over 64 KiB) is the RFC 2675 jumbo option's, else the frame's. An IPv4 source route (LSRR,
  SSRR) keys the flow by its final destination (RFC 791).
- IPv4 and IPv6 fragments, at any tunnel depth, are put together in a bounded table carried
  across chunks (tracekit.capture.decode.FragmentTable): a datagram is one row, at the frame of
  the fragment that completes it, as tshark counts it.
- Frames that are not kept are counted in `stats.skipped` by reason: non_ip, not_tcp_udp,
  ip_fragment (a fragment of a datagram counted at a later frame), short_frame (headers past the
  captured bytes), bad_header (a header that does not fit in its IP packet or frame, a malformed
  IPv4 option, a fragment without data or longer than its frame), bad_timestamp (a pcapng time,
  if_tsoffset included, outside the int64 nanoseconds of 1677-2262), unknown_link_type (a pcapng
  interface of a link type not read here), encrypted (IPsec ESP), compressed (IPComp), and the
  fragments of datagrams never completed: fragment_incomplete, fragment_timeout,
  fragment_evicted.
- A capture cut off mid-record is read up to the cut, with `stats.truncated_tail` and a warning;
  corruption raises CaptureError (the line between them: tracekit.capture.reader).
- Files are opened read-only. Uncompressed files are walked in place through bounded read-only
  mmap windows, compressed ones decompressed in bounded steps; numba kernels walk the records and
  decode the headers, so memory is the output tables plus a few tens of MB.
"""

from tracekit.capture.model import Capture, ReadStats
from tracekit.capture.reader import read_capture, require_tcp

__all__ = ["Capture", "ReadStats", "read_capture", "require_tcp"]
