// ParseHostPort: bracketed IPv6, dotted IPv4 (checked with inet_pton) or a host name.
#include "node/config/host_port.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace chorus::node {
namespace {

// "'text'" (built by appending: GCC 12 warns falsely on "'" + std::string(...)).
std::string Quoted(std::string_view text) {
  std::string out = "'";
  out.append(text).append("'");
  return out;
}

}  // namespace

Result<HostPort> ParseHostPort(std::string_view text) {
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return Err(InvalidArgument("missing ']' after the IPv6 address"));
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return Err(InvalidArgument("missing ':port'"));
    port_text = rest.substr(1);
    in6_addr address6;
    if (inet_pton(AF_INET6, std::string(host).c_str(), &address6) != 1) {
      return Err(InvalidArgument(Quoted(host) + " is not an IPv6 address"));
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return Err(InvalidArgument("missing ':port'"));
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.empty()) return Err(InvalidArgument("missing host before ':'"));
    if (host.find(':') != std::string_view::npos) {
      return Err(InvalidArgument("IPv6 addresses go in brackets: [addr]:port"));
    }
    const bool numeric = std::all_of(host.begin(), host.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
    });
    if (numeric) {
      in_addr address4;
      if (inet_pton(AF_INET, std::string(host).c_str(), &address4) != 1) {
        return Err(InvalidArgument(Quoted(host) + " is not an IPv4 address"));
      }
    } else {
      // RFC 1123 host name: dot-separated labels of letters, digits and '-'.
      bool ok = host.size() <= 253;
      size_t start = 0;
      while (ok && start <= host.size()) {
        size_t end = host.find('.', start);
        if (end == std::string_view::npos) end = host.size();
        std::string_view label = host.substr(start, end - start);
        ok = !label.empty() && label.size() <= 63 && label.front() != '-' && label.back() != '-' &&
             std::all_of(label.begin(), label.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
             });
        start = end + 1;
      }
      if (!ok) return Err(InvalidArgument(Quoted(host) + " is not a valid host name"));
    }
  }
  if (port_text.empty()) return Err(InvalidArgument("missing port after ':'"));
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size()) {
    return Err(InvalidArgument("port " + Quoted(port_text) + " is not a number"));
  }
  if (port > 65535) return Err(InvalidArgument("port " + std::string(port_text) + " is out of range"));
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

}  // namespace chorus::node
