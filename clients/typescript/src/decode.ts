import type { Reply } from './types.js';

/** The reply of a reply stream's entry, or undefined when it is not one. */
export function decodeReply(fields: string[]): Reply | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] !== 'data') continue;
    try {
      const doc = JSON.parse(fields[i + 1]);
      if (doc && doc.v === 1 && doc.type === 'reply' && typeof doc.command_id === 'string' && typeof doc.ok === 'boolean') return doc as Reply;
    } catch {
      return undefined;
    }
  }
  return undefined;
}
