import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { CheckpointRef as _turnkeeper_v1_CheckpointRef, CheckpointRef__Output as _turnkeeper_v1_CheckpointRef__Output } from './turnkeeper/v1/CheckpointRef';
import type { CheckpointServiceClient as _turnkeeper_v1_CheckpointServiceClient, CheckpointServiceDefinition as _turnkeeper_v1_CheckpointServiceDefinition } from './turnkeeper/v1/CheckpointService';
import type { CheckpointTuple as _turnkeeper_v1_CheckpointTuple, CheckpointTuple__Output as _turnkeeper_v1_CheckpointTuple__Output } from './turnkeeper/v1/CheckpointTuple';
import type { CopyThreadRequest as _turnkeeper_v1_CopyThreadRequest, CopyThreadRequest__Output as _turnkeeper_v1_CopyThreadRequest__Output } from './turnkeeper/v1/CopyThreadRequest';
import type { CopyThreadResponse as _turnkeeper_v1_CopyThreadResponse, CopyThreadResponse__Output as _turnkeeper_v1_CopyThreadResponse__Output } from './turnkeeper/v1/CopyThreadResponse';
import type { DeleteForRunsRequest as _turnkeeper_v1_DeleteForRunsRequest, DeleteForRunsRequest__Output as _turnkeeper_v1_DeleteForRunsRequest__Output } from './turnkeeper/v1/DeleteForRunsRequest';
import type { DeleteForRunsResponse as _turnkeeper_v1_DeleteForRunsResponse, DeleteForRunsResponse__Output as _turnkeeper_v1_DeleteForRunsResponse__Output } from './turnkeeper/v1/DeleteForRunsResponse';
import type { DeleteThreadRequest as _turnkeeper_v1_DeleteThreadRequest, DeleteThreadRequest__Output as _turnkeeper_v1_DeleteThreadRequest__Output } from './turnkeeper/v1/DeleteThreadRequest';
import type { DeleteThreadResponse as _turnkeeper_v1_DeleteThreadResponse, DeleteThreadResponse__Output as _turnkeeper_v1_DeleteThreadResponse__Output } from './turnkeeper/v1/DeleteThreadResponse';
import type { GetCheckpointRequest as _turnkeeper_v1_GetCheckpointRequest, GetCheckpointRequest__Output as _turnkeeper_v1_GetCheckpointRequest__Output } from './turnkeeper/v1/GetCheckpointRequest';
import type { GetCheckpointResponse as _turnkeeper_v1_GetCheckpointResponse, GetCheckpointResponse__Output as _turnkeeper_v1_GetCheckpointResponse__Output } from './turnkeeper/v1/GetCheckpointResponse';
import type { ListCheckpointsRequest as _turnkeeper_v1_ListCheckpointsRequest, ListCheckpointsRequest__Output as _turnkeeper_v1_ListCheckpointsRequest__Output } from './turnkeeper/v1/ListCheckpointsRequest';
import type { ListCheckpointsResponse as _turnkeeper_v1_ListCheckpointsResponse, ListCheckpointsResponse__Output as _turnkeeper_v1_ListCheckpointsResponse__Output } from './turnkeeper/v1/ListCheckpointsResponse';
import type { PendingWrite as _turnkeeper_v1_PendingWrite, PendingWrite__Output as _turnkeeper_v1_PendingWrite__Output } from './turnkeeper/v1/PendingWrite';
import type { PruneThreadsRequest as _turnkeeper_v1_PruneThreadsRequest, PruneThreadsRequest__Output as _turnkeeper_v1_PruneThreadsRequest__Output } from './turnkeeper/v1/PruneThreadsRequest';
import type { PruneThreadsResponse as _turnkeeper_v1_PruneThreadsResponse, PruneThreadsResponse__Output as _turnkeeper_v1_PruneThreadsResponse__Output } from './turnkeeper/v1/PruneThreadsResponse';
import type { PutCheckpointRequest as _turnkeeper_v1_PutCheckpointRequest, PutCheckpointRequest__Output as _turnkeeper_v1_PutCheckpointRequest__Output } from './turnkeeper/v1/PutCheckpointRequest';
import type { PutCheckpointResponse as _turnkeeper_v1_PutCheckpointResponse, PutCheckpointResponse__Output as _turnkeeper_v1_PutCheckpointResponse__Output } from './turnkeeper/v1/PutCheckpointResponse';
import type { PutWritesRequest as _turnkeeper_v1_PutWritesRequest, PutWritesRequest__Output as _turnkeeper_v1_PutWritesRequest__Output } from './turnkeeper/v1/PutWritesRequest';
import type { PutWritesResponse as _turnkeeper_v1_PutWritesResponse, PutWritesResponse__Output as _turnkeeper_v1_PutWritesResponse__Output } from './turnkeeper/v1/PutWritesResponse';
import type { TurnFence as _turnkeeper_v1_TurnFence, TurnFence__Output as _turnkeeper_v1_TurnFence__Output } from './turnkeeper/v1/TurnFence';
import type { TypedValue as _turnkeeper_v1_TypedValue, TypedValue__Output as _turnkeeper_v1_TypedValue__Output } from './turnkeeper/v1/TypedValue';
import type { WriteInput as _turnkeeper_v1_WriteInput, WriteInput__Output as _turnkeeper_v1_WriteInput__Output } from './turnkeeper/v1/WriteInput';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  turnkeeper: {
    v1: {
      CheckpointRef: MessageTypeDefinition<_turnkeeper_v1_CheckpointRef, _turnkeeper_v1_CheckpointRef__Output>
      /**
       * CheckpointService is the storage behind turnkeeper's RemoteSaver.
       */
      CheckpointService: SubtypeConstructor<typeof grpc.Client, _turnkeeper_v1_CheckpointServiceClient> & { service: _turnkeeper_v1_CheckpointServiceDefinition }
      CheckpointTuple: MessageTypeDefinition<_turnkeeper_v1_CheckpointTuple, _turnkeeper_v1_CheckpointTuple__Output>
      CopyThreadRequest: MessageTypeDefinition<_turnkeeper_v1_CopyThreadRequest, _turnkeeper_v1_CopyThreadRequest__Output>
      CopyThreadResponse: MessageTypeDefinition<_turnkeeper_v1_CopyThreadResponse, _turnkeeper_v1_CopyThreadResponse__Output>
      DeleteForRunsRequest: MessageTypeDefinition<_turnkeeper_v1_DeleteForRunsRequest, _turnkeeper_v1_DeleteForRunsRequest__Output>
      DeleteForRunsResponse: MessageTypeDefinition<_turnkeeper_v1_DeleteForRunsResponse, _turnkeeper_v1_DeleteForRunsResponse__Output>
      DeleteThreadRequest: MessageTypeDefinition<_turnkeeper_v1_DeleteThreadRequest, _turnkeeper_v1_DeleteThreadRequest__Output>
      DeleteThreadResponse: MessageTypeDefinition<_turnkeeper_v1_DeleteThreadResponse, _turnkeeper_v1_DeleteThreadResponse__Output>
      GetCheckpointRequest: MessageTypeDefinition<_turnkeeper_v1_GetCheckpointRequest, _turnkeeper_v1_GetCheckpointRequest__Output>
      GetCheckpointResponse: MessageTypeDefinition<_turnkeeper_v1_GetCheckpointResponse, _turnkeeper_v1_GetCheckpointResponse__Output>
      ListCheckpointsRequest: MessageTypeDefinition<_turnkeeper_v1_ListCheckpointsRequest, _turnkeeper_v1_ListCheckpointsRequest__Output>
      ListCheckpointsResponse: MessageTypeDefinition<_turnkeeper_v1_ListCheckpointsResponse, _turnkeeper_v1_ListCheckpointsResponse__Output>
      PendingWrite: MessageTypeDefinition<_turnkeeper_v1_PendingWrite, _turnkeeper_v1_PendingWrite__Output>
      PruneStrategy: EnumTypeDefinition
      PruneThreadsRequest: MessageTypeDefinition<_turnkeeper_v1_PruneThreadsRequest, _turnkeeper_v1_PruneThreadsRequest__Output>
      PruneThreadsResponse: MessageTypeDefinition<_turnkeeper_v1_PruneThreadsResponse, _turnkeeper_v1_PruneThreadsResponse__Output>
      PutCheckpointRequest: MessageTypeDefinition<_turnkeeper_v1_PutCheckpointRequest, _turnkeeper_v1_PutCheckpointRequest__Output>
      PutCheckpointResponse: MessageTypeDefinition<_turnkeeper_v1_PutCheckpointResponse, _turnkeeper_v1_PutCheckpointResponse__Output>
      PutWritesRequest: MessageTypeDefinition<_turnkeeper_v1_PutWritesRequest, _turnkeeper_v1_PutWritesRequest__Output>
      PutWritesResponse: MessageTypeDefinition<_turnkeeper_v1_PutWritesResponse, _turnkeeper_v1_PutWritesResponse__Output>
      TurnFence: MessageTypeDefinition<_turnkeeper_v1_TurnFence, _turnkeeper_v1_TurnFence__Output>
      TypedValue: MessageTypeDefinition<_turnkeeper_v1_TypedValue, _turnkeeper_v1_TypedValue__Output>
      WriteInput: MessageTypeDefinition<_turnkeeper_v1_WriteInput, _turnkeeper_v1_WriteInput__Output>
    }
  }
}

