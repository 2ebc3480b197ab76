import { test } from "uvu";
import * as assert from "uvu/assert";
import { DpError } from "../../src/dp/dp_error.ts";
import { expandHostlist, firstHost } from "../../src/dp/hostlist.ts";

test("the first host of node[01-04,07],gpu3 is node01", () => {
  assert.is(firstHost("node[01-04,07],gpu3"), "node01");
});

test("a plain host list's first host is its first name", () => {
  assert.is(firstHost("gpu3,gpu4"), "gpu3");
  assert.is(firstHost("login"), "login");
});

test("a range keeps the zero padding of its lower bound", () => {
  assert.equal(expandHostlist("node[01-04,07],gpu3"), [
    "node01",
    "node02",
    "node03",
    "node04",
    "node07",
    "gpu3",
  ]);
  assert.equal(expandHostlist("n[8-11]"), ["n8", "n9", "n10", "n11"]);
  assert.equal(expandHostlist("n[098-101]"), ["n098", "n099", "n100", "n101"]);
});

test("a name with several brackets expands in Slurm's order", () => {
  assert.equal(expandHostlist("rack[1-2]-n[01-02]"), [
    "rack1-n01",
    "rack1-n02",
    "rack2-n01",
    "rack2-n02",
  ]);
  assert.is(firstHost("rack[3-4]-n[07,02]"), "rack3-n07");
});

test("the first host of a huge range is found without expanding it", () => {
  assert.is(firstHost("node[000001-999999]"), "node000001");
  assert.throws(() => expandHostlist("node[000001-999999]"), /expands to more than/);
});

test("malformed host lists are rejected with the problem named", () => {
  const cases: [string, RegExp][] = [
    ["", /is empty/],
    ["node[01-04", /unclosed '\['/],
    ["node01-04]", /unmatched '\]'/],
    ["node[[1]]", /nested '\['/],
    ["node[04-01]", /descending range '04-01'/],
    ["node[a-b]", /bad range 'a-b'/],
    ["node[]", /bad range ''/],
    ["node1,,node2", /empty host name/],
  ];
  for (const [list, why] of cases) {
    try {
      firstHost(list);
      assert.unreachable(`'${list}' was accepted`);
    } catch (err) {
      assert.instance(err, DpError);
      assert.is((err as DpError).code, "config");
      assert.match((err as Error).message, why);
    }
  }
});

test.run();
