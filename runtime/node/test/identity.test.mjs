// The frozen identity vectors (tests/cases/identity/vectors.json) through
// the binding: byte-identical identities (docs/spec/identity.md).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { requestIdentity } from '../index.js';
import { casesPath } from './support.mjs';

const { vectors } = JSON.parse(readFileSync(casesPath('identity', 'vectors.json'), 'utf8'));

test('every frozen vector gives its identity through the binding', () => {
  assert.ok(vectors.length >= 20, 'the vectors file has its vectors');
  for (const vector of vectors) {
    assert.equal(
      requestIdentity(vector.server, vector.params, vector.fields),
      vector.identity,
      vector.name,
    );
  }
});

test('params that are not an object are refused with a code', () => {
  assert.throws(() => requestIdentity('srv', [1, 2], ['messages']), {
    code: 'binding.params_not_object',
  });
});
