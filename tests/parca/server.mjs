// A Parca ProfileStoreService for memperf's agent tests (tests/agent_parca.rs). The
// service and its messages are Parca's own generated code (@parca/client, protobuf-ts,
// from Parca's proto/), served by grpc-js over cleartext HTTP/2 as Parca serves them; each
// raw_profile is decoded by pprof-format. It refuses what Parca's server refuses
// (pkg/normalizer: a series without __name__, an invalid or repeated label name, a pprof
// that does not parse or whose mapping, location and function ids are not 1, 2, 3 ...),
// and writes one JSON line per request to OUT: each series' labels and, per profile, its
// sample types, the values of each stack (frames from the root, joined by ';') and the
// sample labels. Its Parca-generated code was not written here: build.sh installs it.
//
// node server.mjs PORT OUT [FAIL_FIRST]: the first FAIL_FIRST calls answer UNAVAILABLE.

import { appendFileSync } from "node:fs";
import { register } from "node:module";
import { gunzipSync } from "node:zlib";

import * as grpc from "@grpc/grpc-js";
import { Profile } from "pprof-format";

register("./extensionless.mjs", import.meta.url);
const { ProfileStoreService } = await import(
  "@parca/client/dist/parca/profilestore/v1alpha1/profilestore.js"
);

const [port, out, failFirst] = process.argv.slice(2);
let unavailable = Number(failFirst ?? 0);

const writeRaw = ProfileStoreService.methods.find((m) => m.name === "WriteRaw");

// Prometheus's label name rule, which Parca's server applies to a series' labels.
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

class Refusal extends Error {}

function str(p, i) {
  return p.stringTable.strings[Number(i)] ?? "";
}

// The checks of Parca's ValidatePprofProfile that an encoder can get wrong.
function validate(p) {
  if (p.stringTable.strings.length > 0 && p.stringTable.strings[0] !== "") {
    throw new Refusal("first item in string table is expected to be empty string");
  }
  for (const [what, list] of [
    ["mapping", p.mapping],
    ["location", p.location],
    ["function", p.function],
  ]) {
    list.forEach((x, i) => {
      if (Number(x.id) !== i + 1) {
        throw new Refusal(`${what} id is not sequential`);
      }
    });
  }
  for (const s of p.sample) {
    if (s.value.length !== p.sampleType.length) {
      throw new Refusal(`mismatch: sample has ${s.value.length} values vs. ${p.sampleType.length} types`);
    }
    for (const l of s.locationId) {
      if (Number(l) === 0 || Number(l) > p.location.length) {
        throw new Refusal(`sample location id ${l} is out of range`);
      }
    }
  }
}

function profileSummary(raw) {
  let bytes = Buffer.from(raw);
  const gzipped = bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
  if (gzipped) {
    bytes = gunzipSync(bytes);
  }
  let p;
  try {
    p = Profile.decode(bytes);
  } catch (e) {
    throw new Refusal(`failed to parse profile: ${e}`);
  }
  validate(p);
  const fn = new Map(p.function.map((f) => [Number(f.id), str(p, f.name)]));
  const loc = new Map(
    p.location.map((l) => [Number(l.id), l.line.map((ln) => fn.get(Number(ln.functionId)) ?? "?")]),
  );
  const types = p.sampleType.map((t) => [str(p, t.type), str(p, t.unit)]);
  const stacks = {};
  const labels = {};
  for (const s of p.sample) {
    // pprof lists a stack leaf first, and a location's inlined lines callee first.
    const frames = s.locationId.flatMap((id) => loc.get(Number(id)) ?? []).reverse();
    const key = frames.join(";");
    stacks[key] ??= types.map(() => 0);
    s.value.forEach((v, i) => {
      stacks[key][i] += Number(v);
    });
    for (const l of s.label) {
      const v = Number(l.str) !== 0 ? str(p, l.str) : String(l.num);
      (labels[str(p, l.key)] ??= new Set()).add(v);
    }
  }
  const sampleLabels = Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, [...v].sort()]));
  return {
    gzipped,
    sample_types: types,
    period_type: p.periodType ? [str(p, p.periodType.type), str(p, p.periodType.unit)] : null,
    time_nanos: String(p.timeNanos),
    duration_nanos: String(p.durationNanos),
    stacks,
    sample_labels: sampleLabels,
  };
}

function summarize(req, metadata) {
  const series = req.series.map((s) => {
    const seen = new Set();
    let name = "";
    for (const l of s.labels?.labels ?? []) {
      if (l.name === "__name__") {
        name = l.value;
        continue;
      }
      if (!labelName.test(l.name)) {
        throw new Refusal(`invalid label name: ${l.name}`);
      }
      if (seen.has(l.name)) {
        throw new Refusal(`duplicate label name: ${l.name}`);
      }
      seen.add(l.name);
    }
    if (name === "") {
      throw new Refusal("missing __name__ label");
    }
    return {
      labels: Object.fromEntries((s.labels?.labels ?? []).map((l) => [l.name, l.value])),
      profiles: s.samples.map((raw) => profileSummary(raw.rawProfile)),
    };
  });
  const meta = {};
  for (const k of ["authorization", "x-scope-orgid"]) {
    const v = metadata.get(k);
    if (v.length > 0) {
      meta[k] = String(v[0]);
    }
  }
  return { normalized: req.normalized, series, metadata: meta };
}

const server = new grpc.Server();
server.addService(
  {
    WriteRaw: {
      path: `/${ProfileStoreService.typeName}/${writeRaw.name}`,
      requestStream: false,
      responseStream: false,
      requestSerialize: (m) => Buffer.from(writeRaw.I.toBinary(m)),
      requestDeserialize: (b) => writeRaw.I.fromBinary(b),
      responseSerialize: (m) => Buffer.from(writeRaw.O.toBinary(m)),
      responseDeserialize: (b) => writeRaw.O.fromBinary(b),
    },
  },
  {
    WriteRaw(call, callback) {
      if (unavailable > 0) {
        unavailable -= 1;
        callback({ code: grpc.status.UNAVAILABLE, details: "parca test server: not yet" });
        return;
      }
      try {
        appendFileSync(out, JSON.stringify(summarize(call.request, call.metadata)) + "\n");
        callback(null, writeRaw.O.create());
      } catch (e) {
        const code = e instanceof Refusal ? grpc.status.INVALID_ARGUMENT : grpc.status.INTERNAL;
        appendFileSync(out, JSON.stringify({ refused: String(e.message ?? e) }) + "\n");
        callback({ code, details: String(e.message ?? e) });
      }
    },
  },
);
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) {
    console.error(`parca test server: ${err}`);
    process.exit(1);
  }
});
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => server.tryShutdown(() => process.exit(0)));
}
