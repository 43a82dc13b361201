import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultSchemaDir, generate, typesFile } from '../../scripts/gen-types.mjs';
import { codeValues, isRetryable } from '../../dist/index.js';

test('src/types.ts is what the generator makes of protocol/schema (run `npm run gen-types` after a schema change)', () => {
  assert.equal(fs.readFileSync(typesFile, 'utf8'), generate(defaultSchemaDir));
});

test('a changed schema changes the generated types', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'schema-'));
  for (const f of fs.readdirSync(defaultSchemaDir)) fs.copyFileSync(path.join(defaultSchemaDir, f), path.join(dir, f));
  const task = JSON.parse(fs.readFileSync(path.join(dir, 'task.schema.json'), 'utf8'));
  task.properties.priority = { type: 'integer' };
  fs.writeFileSync(path.join(dir, 'task.schema.json'), JSON.stringify(task));
  const text = generate(dir);
  assert.notEqual(text, generate(defaultSchemaDir));
  assert.match(text, /priority\?: number;/);
  fs.rmSync(dir, { recursive: true });
});

test('every error code has the retryable flag of PROTOCOL.md', () => {
  const doc = fs.readFileSync(path.join(defaultSchemaDir, '..', 'PROTOCOL.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `([A-Z_]+)` \| (yes|no) \|/gm)];
  assert.equal(rows.length, codeValues.length, 'the error code table lists every code of the schema');
  for (const [, code, yes] of rows) {
    assert.ok(codeValues.includes(code), `${code} is in common.schema.json`);
    assert.equal(isRetryable(code), yes === 'yes', code);
  }
  assert.equal(isRetryable('NO_SUCH_CODE'), false);
});
