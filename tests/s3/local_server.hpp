#pragma once
// The S3 server of the CTest fixture s3_server (tests/s3/s3_server.sh), for the S3 suites: its
// endpoint is in $CKPT_S3_SERVER_DIR/endpoint, its key "test:tester", its secret "testing".

#include "s3/client.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <string>

namespace ckpt_s3_test {

inline ckpt::detail::s3::config local_server() {
  const char* dir = std::getenv("CKPT_S3_SERVER_DIR");
  BOOST_TEST_REQUIRE(dir != nullptr, "CKPT_S3_SERVER_DIR is not set: run the test through ctest (fixture s3_server)");
  std::ifstream in(std::string(dir) + "/endpoint");
  std::string endpoint;
  in >> endpoint;
  BOOST_TEST_REQUIRE(!endpoint.empty());
  ckpt::detail::s3::config c;
  c.endpoint = endpoint;
  c.access_key = "test:tester";
  c.secret_key = "testing";
  c.path_style = true;
  return c;
}

}  // namespace ckpt_s3_test
