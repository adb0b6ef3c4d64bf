"""What the tests of envoyproxy/ratelimit's HTTP side on `sluice serve`
share: README Examples 1-11 as files (EXAMPLES), descriptors, a directory
of them, and a test case with `sluice serve` on it (Base)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402


EXAMPLES = {
    # Example 1
    "mongo_cps.yaml": """
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: database
    value: default
    rate_limit:
      unit: hour
      requests_per_unit: 3
""",
    # Example 2
    "messaging.yaml": """
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
""",
    # Example 3
    "edge.yaml": """
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
""",
    # Example 4 (the configuration that matches)
    "example4.yaml": """
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
""",
    # Example 5
    "internal.yaml": """
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
""",
    # Example 6 (per hour here, so the test's seconds refill nothing)
    "example6.yaml": """
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: hour
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: hour
""",
    # Example 7 (per hour)
    "example7.yaml": """
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
""",
    # Example 8 (per hour)
    "example8.yaml": """
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: hour
      requests_per_unit: 20
""",
    # Example 9
    "example9.yaml": """
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
""",
    # Example 10
    "example10.yaml": """
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
""",
    # Example 11
    "example11.yaml": """
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # Without share_threshold, each files_no_share/* match has its own
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
""",
}


def desc(*pairs, **extra):
    d = {"entries": [{"key": k, "value": v} for k, v in pairs]}
    d.update(extra)
    return d


def marketing_limit(sluice):
    """The requests_per_unit sluice's messaging.yaml gives marketing."""
    r = harness.request(sluice.port, "POST", "/json", None,
                        json.dumps({"domain": "messaging",
                                    "descriptors": [desc(
                                        ("message_type", "marketing"),
                                        ("to_number", "1"))]}))
    return r.json()["statuses"][0]["currentLimit"]["requestsPerUnit"]


class EnvoyDir:
    """A directory of envoyproxy/ratelimit YAML files."""

    def __init__(self, files):
        self.root = tempfile.mkdtemp(prefix="sluice-envoy-")
        self.dir = os.path.join(self.root, "config")
        os.mkdir(self.dir)
        for name, text in files.items():
            self.write(name, text)

    def write(self, name, text):
        # name may hold folders ("team/a/x.yaml"): made as needed.
        sub, base = os.path.split(name)
        os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        tmp = os.path.join(self.dir, sub, "." + base + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.dir, name))

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class Base(unittest.TestCase):
    files = EXAMPLES
    settings = ""

    def setUp(self):
        self.env = EnvoyDir(self.files)
        self.addCleanup(self.env.remove)
        self.sluice = Sluice(self.config())
        self.addCleanup(self.sluice.stop)

    def config(self, extra=""):
        return "envoy:\n  config_dir: %s\n%s%s" % (self.env.dir,
                                                  self.settings, extra)

    def rl(self, domain, *descriptors, **top):
        body = {"domain": domain, "descriptors": list(descriptors)}
        body.update(top)
        r = self.sluice.request("POST", "/json",
                                {"Content-Type": "application/json"},
                                json.dumps(body))
        return r

    def ok(self, domain, *descriptors, **top):
        r = self.rl(domain, *descriptors, **top)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["overallCode"], "OK")
        return r.json()

    def over(self, domain, *descriptors, **top):
        r = self.rl(domain, *descriptors, **top)
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.json()["overallCode"], "OVER_LIMIT")
        return r.json()
