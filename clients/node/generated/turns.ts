import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from './google/protobuf/Duration';
import type { ListValue as _google_protobuf_ListValue, ListValue__Output as _google_protobuf_ListValue__Output } from './google/protobuf/ListValue';
import type { Struct as _google_protobuf_Struct, Struct__Output as _google_protobuf_Struct__Output } from './google/protobuf/Struct';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from './google/protobuf/Timestamp';
import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from './google/protobuf/Value';
import type { AppendEventsRequest as _turnkeeper_v1_AppendEventsRequest, AppendEventsRequest__Output as _turnkeeper_v1_AppendEventsRequest__Output } from './turnkeeper/v1/AppendEventsRequest';
import type { AppendEventsResponse as _turnkeeper_v1_AppendEventsResponse, AppendEventsResponse__Output as _turnkeeper_v1_AppendEventsResponse__Output } from './turnkeeper/v1/AppendEventsResponse';
import type { CancelTurnRequest as _turnkeeper_v1_CancelTurnRequest, CancelTurnRequest__Output as _turnkeeper_v1_CancelTurnRequest__Output } from './turnkeeper/v1/CancelTurnRequest';
import type { CancelTurnResponse as _turnkeeper_v1_CancelTurnResponse, CancelTurnResponse__Output as _turnkeeper_v1_CancelTurnResponse__Output } from './turnkeeper/v1/CancelTurnResponse';
import type { ClaimTurnRequest as _turnkeeper_v1_ClaimTurnRequest, ClaimTurnRequest__Output as _turnkeeper_v1_ClaimTurnRequest__Output } from './turnkeeper/v1/ClaimTurnRequest';
import type { ClaimTurnResponse as _turnkeeper_v1_ClaimTurnResponse, ClaimTurnResponse__Output as _turnkeeper_v1_ClaimTurnResponse__Output } from './turnkeeper/v1/ClaimTurnResponse';
import type { Event as _turnkeeper_v1_Event, Event__Output as _turnkeeper_v1_Event__Output } from './turnkeeper/v1/Event';
import type { EventInput as _turnkeeper_v1_EventInput, EventInput__Output as _turnkeeper_v1_EventInput__Output } from './turnkeeper/v1/EventInput';
import type { FinishTurnRequest as _turnkeeper_v1_FinishTurnRequest, FinishTurnRequest__Output as _turnkeeper_v1_FinishTurnRequest__Output } from './turnkeeper/v1/FinishTurnRequest';
import type { FinishTurnResponse as _turnkeeper_v1_FinishTurnResponse, FinishTurnResponse__Output as _turnkeeper_v1_FinishTurnResponse__Output } from './turnkeeper/v1/FinishTurnResponse';
import type { GetTurnRequest as _turnkeeper_v1_GetTurnRequest, GetTurnRequest__Output as _turnkeeper_v1_GetTurnRequest__Output } from './turnkeeper/v1/GetTurnRequest';
import type { GetTurnResponse as _turnkeeper_v1_GetTurnResponse, GetTurnResponse__Output as _turnkeeper_v1_GetTurnResponse__Output } from './turnkeeper/v1/GetTurnResponse';
import type { HeartbeatRequest as _turnkeeper_v1_HeartbeatRequest, HeartbeatRequest__Output as _turnkeeper_v1_HeartbeatRequest__Output } from './turnkeeper/v1/HeartbeatRequest';
import type { HeartbeatResponse as _turnkeeper_v1_HeartbeatResponse, HeartbeatResponse__Output as _turnkeeper_v1_HeartbeatResponse__Output } from './turnkeeper/v1/HeartbeatResponse';
import type { ListEventsRequest as _turnkeeper_v1_ListEventsRequest, ListEventsRequest__Output as _turnkeeper_v1_ListEventsRequest__Output } from './turnkeeper/v1/ListEventsRequest';
import type { ListEventsResponse as _turnkeeper_v1_ListEventsResponse, ListEventsResponse__Output as _turnkeeper_v1_ListEventsResponse__Output } from './turnkeeper/v1/ListEventsResponse';
import type { ListTurnsRequest as _turnkeeper_v1_ListTurnsRequest, ListTurnsRequest__Output as _turnkeeper_v1_ListTurnsRequest__Output } from './turnkeeper/v1/ListTurnsRequest';
import type { ListTurnsResponse as _turnkeeper_v1_ListTurnsResponse, ListTurnsResponse__Output as _turnkeeper_v1_ListTurnsResponse__Output } from './turnkeeper/v1/ListTurnsResponse';
import type { Owner as _turnkeeper_v1_Owner, Owner__Output as _turnkeeper_v1_Owner__Output } from './turnkeeper/v1/Owner';
import type { ParkTurnRequest as _turnkeeper_v1_ParkTurnRequest, ParkTurnRequest__Output as _turnkeeper_v1_ParkTurnRequest__Output } from './turnkeeper/v1/ParkTurnRequest';
import type { ParkTurnResponse as _turnkeeper_v1_ParkTurnResponse, ParkTurnResponse__Output as _turnkeeper_v1_ParkTurnResponse__Output } from './turnkeeper/v1/ParkTurnResponse';
import type { RedriveRequest as _turnkeeper_v1_RedriveRequest, RedriveRequest__Output as _turnkeeper_v1_RedriveRequest__Output } from './turnkeeper/v1/RedriveRequest';
import type { RedriveResponse as _turnkeeper_v1_RedriveResponse, RedriveResponse__Output as _turnkeeper_v1_RedriveResponse__Output } from './turnkeeper/v1/RedriveResponse';
import type { RedrivenTurn as _turnkeeper_v1_RedrivenTurn, RedrivenTurn__Output as _turnkeeper_v1_RedrivenTurn__Output } from './turnkeeper/v1/RedrivenTurn';
import type { Reset as _turnkeeper_v1_Reset, Reset__Output as _turnkeeper_v1_Reset__Output } from './turnkeeper/v1/Reset';
import type { ResumeDetachedRequest as _turnkeeper_v1_ResumeDetachedRequest, ResumeDetachedRequest__Output as _turnkeeper_v1_ResumeDetachedRequest__Output } from './turnkeeper/v1/ResumeDetachedRequest';
import type { ResumeDetachedResponse as _turnkeeper_v1_ResumeDetachedResponse, ResumeDetachedResponse__Output as _turnkeeper_v1_ResumeDetachedResponse__Output } from './turnkeeper/v1/ResumeDetachedResponse';
import type { StartTurnRequest as _turnkeeper_v1_StartTurnRequest, StartTurnRequest__Output as _turnkeeper_v1_StartTurnRequest__Output } from './turnkeeper/v1/StartTurnRequest';
import type { StartTurnResponse as _turnkeeper_v1_StartTurnResponse, StartTurnResponse__Output as _turnkeeper_v1_StartTurnResponse__Output } from './turnkeeper/v1/StartTurnResponse';
import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from './turnkeeper/v1/Turn';
import type { TurnServiceClient as _turnkeeper_v1_TurnServiceClient, TurnServiceDefinition as _turnkeeper_v1_TurnServiceDefinition } from './turnkeeper/v1/TurnService';
import type { TurnStatusRequest as _turnkeeper_v1_TurnStatusRequest, TurnStatusRequest__Output as _turnkeeper_v1_TurnStatusRequest__Output } from './turnkeeper/v1/TurnStatusRequest';
import type { TurnStatusResponse as _turnkeeper_v1_TurnStatusResponse, TurnStatusResponse__Output as _turnkeeper_v1_TurnStatusResponse__Output } from './turnkeeper/v1/TurnStatusResponse';
import type { WatchTurnRequest as _turnkeeper_v1_WatchTurnRequest, WatchTurnRequest__Output as _turnkeeper_v1_WatchTurnRequest__Output } from './turnkeeper/v1/WatchTurnRequest';
import type { WatchTurnResponse as _turnkeeper_v1_WatchTurnResponse, WatchTurnResponse__Output as _turnkeeper_v1_WatchTurnResponse__Output } from './turnkeeper/v1/WatchTurnResponse';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  google: {
    protobuf: {
      Duration: MessageTypeDefinition<_google_protobuf_Duration, _google_protobuf_Duration__Output>
      ListValue: MessageTypeDefinition<_google_protobuf_ListValue, _google_protobuf_ListValue__Output>
      NullValue: EnumTypeDefinition
      Struct: MessageTypeDefinition<_google_protobuf_Struct, _google_protobuf_Struct__Output>
      Timestamp: MessageTypeDefinition<_google_protobuf_Timestamp, _google_protobuf_Timestamp__Output>
      Value: MessageTypeDefinition<_google_protobuf_Value, _google_protobuf_Value__Output>
    }
  }
  turnkeeper: {
    v1: {
      AppendEventsRequest: MessageTypeDefinition<_turnkeeper_v1_AppendEventsRequest, _turnkeeper_v1_AppendEventsRequest__Output>
      AppendEventsResponse: MessageTypeDefinition<_turnkeeper_v1_AppendEventsResponse, _turnkeeper_v1_AppendEventsResponse__Output>
      CancelTurnRequest: MessageTypeDefinition<_turnkeeper_v1_CancelTurnRequest, _turnkeeper_v1_CancelTurnRequest__Output>
      CancelTurnResponse: MessageTypeDefinition<_turnkeeper_v1_CancelTurnResponse, _turnkeeper_v1_CancelTurnResponse__Output>
      ClaimTurnRequest: MessageTypeDefinition<_turnkeeper_v1_ClaimTurnRequest, _turnkeeper_v1_ClaimTurnRequest__Output>
      ClaimTurnResponse: MessageTypeDefinition<_turnkeeper_v1_ClaimTurnResponse, _turnkeeper_v1_ClaimTurnResponse__Output>
      Event: MessageTypeDefinition<_turnkeeper_v1_Event, _turnkeeper_v1_Event__Output>
      EventInput: MessageTypeDefinition<_turnkeeper_v1_EventInput, _turnkeeper_v1_EventInput__Output>
      FinishTurnRequest: MessageTypeDefinition<_turnkeeper_v1_FinishTurnRequest, _turnkeeper_v1_FinishTurnRequest__Output>
      FinishTurnResponse: MessageTypeDefinition<_turnkeeper_v1_FinishTurnResponse, _turnkeeper_v1_FinishTurnResponse__Output>
      GetTurnRequest: MessageTypeDefinition<_turnkeeper_v1_GetTurnRequest, _turnkeeper_v1_GetTurnRequest__Output>
      GetTurnResponse: MessageTypeDefinition<_turnkeeper_v1_GetTurnResponse, _turnkeeper_v1_GetTurnResponse__Output>
      HeartbeatRequest: MessageTypeDefinition<_turnkeeper_v1_HeartbeatRequest, _turnkeeper_v1_HeartbeatRequest__Output>
      HeartbeatResponse: MessageTypeDefinition<_turnkeeper_v1_HeartbeatResponse, _turnkeeper_v1_HeartbeatResponse__Output>
      ListEventsRequest: MessageTypeDefinition<_turnkeeper_v1_ListEventsRequest, _turnkeeper_v1_ListEventsRequest__Output>
      ListEventsResponse: MessageTypeDefinition<_turnkeeper_v1_ListEventsResponse, _turnkeeper_v1_ListEventsResponse__Output>
      ListTurnsRequest: MessageTypeDefinition<_turnkeeper_v1_ListTurnsRequest, _turnkeeper_v1_ListTurnsRequest__Output>
      ListTurnsResponse: MessageTypeDefinition<_turnkeeper_v1_ListTurnsResponse, _turnkeeper_v1_ListTurnsResponse__Output>
      MultitaskStrategy: EnumTypeDefinition
      Outcome: EnumTypeDefinition
      Owner: MessageTypeDefinition<_turnkeeper_v1_Owner, _turnkeeper_v1_Owner__Output>
      ParkTurnRequest: MessageTypeDefinition<_turnkeeper_v1_ParkTurnRequest, _turnkeeper_v1_ParkTurnRequest__Output>
      ParkTurnResponse: MessageTypeDefinition<_turnkeeper_v1_ParkTurnResponse, _turnkeeper_v1_ParkTurnResponse__Output>
      RedriveRequest: MessageTypeDefinition<_turnkeeper_v1_RedriveRequest, _turnkeeper_v1_RedriveRequest__Output>
      RedriveResponse: MessageTypeDefinition<_turnkeeper_v1_RedriveResponse, _turnkeeper_v1_RedriveResponse__Output>
      RedrivenTurn: MessageTypeDefinition<_turnkeeper_v1_RedrivenTurn, _turnkeeper_v1_RedrivenTurn__Output>
      Reset: MessageTypeDefinition<_turnkeeper_v1_Reset, _turnkeeper_v1_Reset__Output>
      ResumeDetachedRequest: MessageTypeDefinition<_turnkeeper_v1_ResumeDetachedRequest, _turnkeeper_v1_ResumeDetachedRequest__Output>
      ResumeDetachedResponse: MessageTypeDefinition<_turnkeeper_v1_ResumeDetachedResponse, _turnkeeper_v1_ResumeDetachedResponse__Output>
      StartTurnRequest: MessageTypeDefinition<_turnkeeper_v1_StartTurnRequest, _turnkeeper_v1_StartTurnRequest__Output>
      StartTurnResponse: MessageTypeDefinition<_turnkeeper_v1_StartTurnResponse, _turnkeeper_v1_StartTurnResponse__Output>
      Turn: MessageTypeDefinition<_turnkeeper_v1_Turn, _turnkeeper_v1_Turn__Output>
      /**
       * TurnService owns the turn journal (turns.db): its state machine, the retained
       * events of every turn, and the outbox that mirrors both to NATS.
       */
      TurnService: SubtypeConstructor<typeof grpc.Client, _turnkeeper_v1_TurnServiceClient> & { service: _turnkeeper_v1_TurnServiceDefinition }
      TurnState: EnumTypeDefinition
      TurnStatusRequest: MessageTypeDefinition<_turnkeeper_v1_TurnStatusRequest, _turnkeeper_v1_TurnStatusRequest__Output>
      TurnStatusResponse: MessageTypeDefinition<_turnkeeper_v1_TurnStatusResponse, _turnkeeper_v1_TurnStatusResponse__Output>
      WatchTurnRequest: MessageTypeDefinition<_turnkeeper_v1_WatchTurnRequest, _turnkeeper_v1_WatchTurnRequest__Output>
      WatchTurnResponse: MessageTypeDefinition<_turnkeeper_v1_WatchTurnResponse, _turnkeeper_v1_WatchTurnResponse__Output>
    }
  }
}

