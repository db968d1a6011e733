import { connect } from '@card-dev/client';

const client = await connect(); // the daemon of $CARD_HOME, else the default home, checked before the token is sent
const agent = (await client.agentsDetect({})).find((a) => a.execution.state === 'runnable');
if (!agent) throw new Error('no agent CLI is installed and runnable');
for await (const ev of client.invoke({ id: agent.id, task: 'Say hello in one sentence.', cwd: process.cwd() })) {
  if (ev.kind === 'text') process.stdout.write(ev.text ?? '');
  if (ev.kind === 'done' || ev.kind === 'error') console.log(`\n${agent.id}: ${ev.status}`);
}
client.close();
