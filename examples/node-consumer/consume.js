#!/usr/bin/env node
// Reads the agentvisor worker streams from Node.js and validates every entry
// against the protocol's JSON Schemas (protocol/schema): worker:lifecycle,
// every worker's output stream (progress and outputs), and the developer
// queue's output stream. Proof that the protocol serves consumers that are
// not Go.
//
//   REDIS_URL=redis://consumer:<password>@127.0.0.1:6379/0 node consume.js [--follow] [--quiet]
//
// Without REDIS_URL it reads the project's Redis (scripts/redis.sh) as its
// consumer user: REDIS_CONSUMER_URL of the environment or of
// /var/lib/agentvisor/redis/credentials.env.
//
// Without --follow it reads what the streams hold and exits: 0 when every
// entry is valid, 1 when one is not (each is printed with its errors), 2
// when Redis cannot be read. WORKER_KEY_PREFIX sets the key prefix
// ("worker" by default). SCHEMA_DIR points at the schemas (by default
// ../../protocol/schema from this file).
'use strict';

const fs = require('fs');
const path = require('path');
const { createClient } = require('redis');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;

const prefix = process.env.WORKER_KEY_PREFIX || 'worker';
const schemaDir = process.env.SCHEMA_DIR || path.join(__dirname, '..', '..', 'protocol', 'schema');
const follow = process.argv.includes('--follow');
const quiet = process.argv.includes('--quiet');

// One validator per entry type, from <type>.schema.json; common.schema.json
// is what the others refer to.
function loadValidators() {
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  addFormats(ajv);
  const files = fs.readdirSync(schemaDir).filter((f) => f.endsWith('.schema.json'));
  for (const f of files) {
    ajv.addSchema(JSON.parse(fs.readFileSync(path.join(schemaDir, f), 'utf8')), f);
  }
  const byType = {};
  for (const type of ['lifecycle', 'progress', 'output', 'permission_request']) {
    byType[type] = ajv.getSchema(`${type}.schema.json`);
    if (!byType[type]) throw new Error(`no schema for ${type} in ${schemaDir}`);
  }
  return byType;
}

const credentialsFile = '/var/lib/agentvisor/redis/credentials.env';

// The Redis URL: REDIS_URL, else the project's consumer URL.
function redisURL() {
  if (process.env.REDIS_URL) return process.env.REDIS_URL;
  if (process.env.REDIS_CONSUMER_URL) return process.env.REDIS_CONSUMER_URL;
  let text;
  try {
    text = fs.readFileSync(credentialsFile, 'utf8');
  } catch (err) {
    throw new Error(`REDIS_URL is not set and ${credentialsFile} cannot be read (${err.code || err.message}): ` +
      'the project\'s Redis: `bash scripts/redis.sh` writes it; or set REDIS_URL');
  }
  const m = text.match(/^(?:export )?REDIS_CONSUMER_URL=["']?([^"'\s]+)/m);
  if (!m) throw new Error(`REDIS_URL is not set and ${credentialsFile} has no REDIS_CONSUMER_URL`);
  return m[1];
}

async function main() {
  const validators = loadValidators();
  const redis = createClient({
    url: redisURL(),
    socket: { connectTimeout: 3000, reconnectStrategy: false }, // fail, do not hang
  });
  redis.on('error', () => {}); // reported by the command that fails
  await redis.connect();

  const counts = { lifecycle: 0, progress: 0, output: 0 };
  let invalid = 0;
  const check = (stream, entry) => {
    const raw = entry.message.data;
    let doc;
    try {
      doc = JSON.parse(raw);
    } catch (e) {
      invalid++;
      console.log(`INVALID ${stream} ${entry.id}: not JSON: ${e.message}`);
      return;
    }
    const validate = validators[doc.type];
    if (!validate) {
      invalid++;
      console.log(`INVALID ${stream} ${entry.id}: unexpected type ${JSON.stringify(doc.type)}`);
      return;
    }
    if (!validate(doc)) {
      invalid++;
      console.log(`INVALID ${stream} ${entry.id} (${doc.type}): ${JSON.stringify(validate.errors)}`);
      return;
    }
    counts[doc.type]++;
    // A worker named on the lifecycle stream has an output stream, even one
    // removed from the workers set since.
    if (doc.type === 'lifecycle') addStream(`${prefix}:${doc.worker_id}:output`);
    if (quiet) return;
    const who = (doc.worker_id || '').slice(0, 8);
    const what = doc.type === 'lifecycle' ? doc.event : doc.type === 'progress' ? JSON.stringify(doc.step) : `${doc.request_id} ${doc.status}`;
    console.log(`${entry.id}  ${who}  ${doc.type.padEnd(9)} ${what}`);
  };

  // The streams: lifecycle, the developer queue's output, and the output
  // stream of every worker in the workers set.
  const cursors = new Map();
  const addStream = (s) => { if (!cursors.has(s)) cursors.set(s, '0-0'); };
  const scan = async () => {
    addStream(`${prefix}:lifecycle`);
    addStream(`${prefix}:developer:output`);
    for (const id of await redis.sMembers(`${prefix}:workers`)) addStream(`${prefix}:${id}:output`);
  };
  await scan();

  for (;;) {
    const streams = [...cursors].map(([key, id]) => ({ key, id }));
    const res = await redis.xRead(streams, follow ? { BLOCK: 1000, COUNT: 100 } : { COUNT: 1000 });
    if (!res) {
      const known = cursors.size;
      await scan();
      if (!follow && cursors.size === known) break;
      continue;
    }
    for (const { name, messages } of res) {
      for (const m of messages) {
        cursors.set(name, m.id);
        check(name, m);
      }
    }
  }
  await redis.quit();
  console.log(`validated ${counts.lifecycle + counts.progress + counts.output + invalid} entries: ` +
    `lifecycle ${counts.lifecycle}, progress ${counts.progress}, output ${counts.output}; invalid ${invalid}`);
  process.exitCode = invalid > 0 ? 1 : 0;
}

main().catch((e) => {
  console.error(`node-consumer: ${e.message}`);
  process.exit(2);
});
