// The dedicated worker's entry: one LabEngine answering the page (src/app/engine-client.ts). WebGPU
// works in workers (navigator.gpu on WorkerNavigator), so the GPU device lives here, with the model,
// the rollouts and the trainer; the page's thread only draws.
import { LabEngine } from './engine.ts';
import { type Endpoint, eventPoster, serveEngine } from './rpc.ts';

const scope = self as unknown as Endpoint;
serveEngine(scope, new LabEngine(eventPoster(scope)));
