"""A tiny HTTP/1.0 responder for DR tests: answers every request with its own address.

`python banner_server.py ADDRESS PORT` listens on every IPv4 and IPv6 address (so it accepts
connections to the VIP on lo) and replies `server ADDRESS` to whatever arrives.
"""

from __future__ import annotations

import socket
import socketserver
import sys
import threading

NAME = sys.argv[1]


class Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            self.request.recv(4096)
        except OSError:
            return
        body = f"server {NAME}\n".encode()
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


class Server4(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 512


class Server6(Server4):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


if __name__ == "__main__":
    port = int(sys.argv[2])
    s4 = Server4(("0.0.0.0", port), Handler)
    s6 = Server6(("::", port), Handler)
    threading.Thread(target=s6.serve_forever, daemon=True).start()
    s4.serve_forever()
