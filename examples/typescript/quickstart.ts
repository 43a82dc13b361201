// The quickstart (examples/quickstart/main.go) in TypeScript: it creates a
// worker, sends it a task, prints its progress and its output, and deletes
// the worker. Unlike the Go quickstart, which runs the spawner in its own
// process, it asks a running worker-manager (over Redis) for the worker.
//
//   npm ci && npm run build
//   REDIS_URL=redis://consumer:<password>@127.0.0.1:6379/0 node dist/quickstart.js "Say hello."
//
// Without REDIS_URL it uses the project's Redis (scripts/redis.sh) as its
// consumer user: REDIS_CONSUMER_URL of the environment or of
// /var/lib/agentvisor/redis/credentials.env. WORKER_KEY_PREFIX sets the
// key prefix, as for every component.
import fs from 'node:fs';
import { AgentvisorClient } from '@agentvisor/client';

const credentials = '/var/lib/agentvisor/redis/credentials.env';

function redisUrl(): string {
  const url = process.env.REDIS_URL || process.env.REDIS_CONSUMER_URL;
  if (url) return url;
  const text = fs.existsSync(credentials) ? fs.readFileSync(credentials, 'utf8') : '';
  const m = text.match(/^(?:export )?REDIS_CONSUMER_URL=["']?([^"'\s]+)/m);
  if (!m) throw new Error(`set REDIS_URL (no REDIS_CONSUMER_URL in ${credentials}: bash scripts/redis.sh writes it)`);
  return m[1];
}

async function main(prompt: string): Promise<void> {
  // 1. A client of the runtime's Redis (redis://, rediss:// or a sentinel URL).
  const client = await AgentvisorClient.connect({ url: redisUrl() });
  try {
    // 2. A worker: Claude Code in its own container, which may report progress.
    const { workerId, worker } = await client.createWorker({ agentType: 'claude', projectId: 'quickstart', allowedCommands: ['worker.progress'] });
    console.log(`worker ${workerId} created (image ${worker.image ?? '?'})`);
    try {
      // 3. A task on the worker's input stream, and 4. its output from the
      // worker's output stream (progress events arrive there first).
      const sent = await client.sendTask(workerId, { requestId: `quickstart-${Date.now()}`, projectId: 'quickstart', prompt });
      console.log(`task ${sent.requestId} sent`);
      const o = await client.awaitOutput(sent, { timeoutMs: 5 * 60_000, onProgress: (p) => console.log(`progress: ${p.step}`) });
      console.log(`output: ${o.status}, result ${JSON.stringify(o.result)}, ${o.usage.input} input and ${o.usage.output} output tokens, $${o.cost_usd.toFixed(4)}`);
      if (o.status !== 'complete') throw new Error(`the task ended ${o.status}: ${JSON.stringify(o.error)}`);
    } finally {
      await client.deleteWorker(workerId);
    }
  } finally {
    await client.close();
  }
}

const prompt = process.argv.slice(2).join(' ') ||
  'Report progress by running: worker-wrapper progress --step "Greeting" --pct 100, ' +
  'then finish with {"status": "complete", "result": {"greeting": "hello"}}.';
main(prompt).catch((e) => {
  console.error(`quickstart: ${e instanceof Error ? e.message : e}`);
  process.exit(1);
});
