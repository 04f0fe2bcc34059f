// Vercel AI SDK weather agent (ToolLoopAgent), traced by @ai-sdk/otel through the OTel Node SDK.
//
// The NodeSDK reads OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_PROTOCOL (capture.py sets
// them) and exports OTLP/HTTP to the recorder. `registerTelemetry(new OpenTelemetry())` is the AI SDK
// v7 integration (GenAI semconv); CORPUS_TELEMETRY=legacy registers `LegacyOpenTelemetry` (ai.* attributes).
// CORPUS_MODEL_API=responses uses openai.responses(...) (else openai.chat(...));
// CORPUS_STREAM=1 uses agent.stream(...) instead of agent.generate(...).
import { NodeSDK } from '@opentelemetry/sdk-node';
import { LegacyOpenTelemetry, OpenTelemetry } from '@ai-sdk/otel';
import { createOpenAI } from '@ai-sdk/openai';
import { registerTelemetry, stepCountIs, tool, ToolLoopAgent } from 'ai';
import { z } from 'zod';

const sdk = new NodeSDK({ serviceName: 'weather-agent-corpus' });
sdk.start();
registerTelemetry(process.env.CORPUS_TELEMETRY === 'legacy' ? new LegacyOpenTelemetry() : new OpenTelemetry());

const openai = createOpenAI({ baseURL: process.env.CORPUS_LLM_URL, apiKey: process.env.OPENAI_API_KEY });
const model = process.env.CORPUS_MODEL_API === 'responses' ? openai.responses('gpt-4o-mini') : openai.chat('gpt-4o-mini');

const agent = new ToolLoopAgent({
  id: 'weather-agent',
  model,
  instructions: 'You are a weather assistant. Use the get_weather tool to answer.',
  tools: {
    get_weather: tool({
      description: 'Get the current weather for a city.',
      inputSchema: z.object({ city: z.string().describe('The city to get the weather for.') }),
      execute: async ({ city }) => `18C and sunny in ${city}`,
    }),
  },
  stopWhen: stepCountIs(4),
  temperature: 0.2,
  experimental_telemetry: {
    isEnabled: true,
    functionId: 'weather-agent',
    metadata: { sessionId: 'conv-42', userId: 'user-7' },
  },
});

let answer;
if (process.env.CORPUS_STREAM === '1') {
  const result = await agent.stream({ prompt: 'What is the weather in Paris?' });
  answer = await result.text;
} else {
  const result = await agent.generate({ prompt: 'What is the weather in Paris?' });
  answer = result.text;
}
console.log('CORPUS_RESULT ' + JSON.stringify({ answer }));
await sdk.shutdown();
