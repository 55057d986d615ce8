{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
The filter engine shared by dense and convolution layers: one window of @K@
values in, @F@ filter (neuron) results out, computed by @p@ processing
elements (PEs) that spend @b@ cycles on each group of @p@ filters, in a
datapath pipelined with one register per @l@ adder levels.

This module states what the engine does (its knobs, sizes and exact timing)
and wires its parts, one module per concern:

* "K2C.EngineControl": the state machine: steps, groups, the input
  handshake and the credit count of windows held;
* "K2C.EngineWeights": the walk through the weight ROM, one word per step
  (or through its block RAM a host writes: 'WeightMemory', "K2C.WeightBus");
* "K2C.EngineDatapath": multipliers, adder trees, accumulators,
  requantization and activation, the pipeline registers between them, and
  the result register; its depth is 'PipeDepth';
* the output queue, a 'K2C.Fifo.fifo' of 'QueueDepth' results (LUT RAM).

The window is held here: a register loaded with each accepted window and
advanced after every step ('engineWith').

= The three knobs

* @p@, @1 <= p <= F@: PEs, i.e. filters computed in parallel. The @F@ filters
  form @G = ceil(F / p)@ groups; group @g@ is filters @g*p .. g*p+p-1@ (in the
  last group, filters past @F@ are zero padding: computed, then dropped).
* @b@, @1 <= b <= K@: cycles a PE spends on one filter. The window, zero
  padded to @b * ch@ values, is cut into @b@ chunks of @ch = ceil(K / b)@
  values; a PE multiplies one chunk per cycle.
* @l >= 0@: adder levels per pipeline stage. @l = 0@ computes a step in one
  cycle; @l >= 1@ adds @D@ = 'PipeDepth' cycles of latency
  (@7 + t + TreeStages ch l b + [G >= 2]@, @t@ the registers after a table
  activation's read: "K2C.EngineDatapath"), with the same throughput and the
  same values.

= Hardware

* multipliers: @p * ch@; adders: @p@ trees of @ch + 1@ terms and @p@
  accumulator adders with clamps ("K2C.Filter"); @p@ per-neuron functions;
* ROM: @G * b@ words of @p * (ch * BitSize w + BitSize bias)@ bits;
* registers: the window (@b * ch@ values, a rotating shift register: the
  current chunk is always its head, so no multiplexer picks chunks), the
  datapath's ("K2C.EngineDatapath") and the control's
  ("K2C.EngineControl");
* the output queue: @Q@ = 'QueueDepth' = @2 + (D + e + 1) `div` (G * b)@
  results, @e@ below.

= Protocol and exact timing

The engine is idle or busy with one window. Busy, it takes one /step/ per
ROM word, @S = G * b@ steps, one per cycle: it never stalls. Downstream
stalls reach it only through the output queue and a credit count of the
windows it holds (accepted, result not yet taken from the queue).

* The window is loaded @e@ cycles after it moves in ('Loading'): @e = 0@
  ('engine', 'atAccept'), from the input beat as it moves; @e = 1@
  ('engineFrom' with 'afterAccept'), in the next cycle, from a producer's
  register that still holds it then (a window generator's shift register).
* Input ready (registered state only) = (idle, or busy with the last word,
  in the cycle after the next when @e = 1@) and fewer than @Q@ windows held.
  A window moves in when ready and valid. The ROM reads word 0 in the
  engine's last step (and once after reset) and does not read while idle, so
  word 0 is at the ROM output in the cycle after a window is loaded; each
  step reads the word of the next.
* A window accepted in cycle @a@ takes its steps in cycles @a + e + 1 .. a +
  e + S@; its complete result enters the queue in cycle @a + e + S + D@
  (@D = 0@ when @l = 0@: in the last step's cycle).
* The queue ("K2C.Fifo") shows a result from the cycle after it entered, and
  not before the previous result has moved out.

Consequences, with @v_i@ the first cycle window @i@ is offered and @M_i@ the
cycle its result moves out:

* window @i@ moves in in @a_i = max(v_i, a_(i-1) + S, M_(i-Q) + 1)@ (the
  same rule for both @e@: with @e = 1@ the next window is accepted in the
  last step but one and loaded in the last step);
* its result is valid from @max(a_i + e + S + D, M_(i-1)) + 1@;
* with downstream always ready: @a_i = max(v_i, a_(i-1) + S)@ and the result
  moves in @a_i + e + S + D + 1@. One window every @S@ cycles, also for @S =
  1@; @Q@ is the fewest results for which this holds.

Ready never depends on the input's valid nor, combinationally, on
downstream's ready.

= Variants

'engineWith' is this engine for any way of holding the window and of
handing chunks to the PEs; 'engine' shares one window among all PEs, the
depthwise engine ("K2C.Depthwise") gives each PE its own channel's window.
Control, ROM walk, datapath, queue and hence every timing rule above are the
same code in both.
-}
module K2C.Engine
  ( CeilDiv
  , EngineShape
  , PipeDepth
  , QueueDepth
  , TreeStages
  , Loading
  , atAccept
  , afterAccept
  , engine
  , engineFrom
  , engineWith
  , chunks
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Activation (Finish, TableRegs)
import K2C.EngineControl (Control (..), control)
import K2C.EngineDatapath (PipeDepth, TreeStages, datapath)
import K2C.Fifo (fifo)
import K2C.Filter (Accumulates)
import K2C.Stream (Stream)
import K2C.WeightMemory (WeightMemory (..))

-- | @ceil(a / b)@ for @b >= 1@.
type CeilDiv a b = Div (a + b - 1) b

-- | The sizes of an engine with window length @k@, @f@ filters, @p@ PEs and
-- @b@ cycles per group: chunk length @ch = ceil(k / b)@ and @g = ceil(f / p)@
-- groups. The inequalities are implied by the equalities but stated so that
-- the type checker can use them.
type EngineShape k f p b ch g =
  ( KnownNat k, KnownNat f, KnownNat p, KnownNat b, KnownNat ch, KnownNat g
  , 1 <= k, 1 <= f, 1 <= p, 1 <= b, p <= f, b <= k
  , ch ~ CeilDiv k b, g ~ CeilDiv f p
  , k <= (b * ch), f <= (g * p), 1 <= g, 1 <= (g * b) )

-- | @Q@: the output queue's depth, which is also the most windows the engine
-- holds at once (accepted, result not yet taken). @2 + (D + e + 1) `div` S@
-- with @S = G * b@ steps per window and @e@ the load's delay ('Loading'): the
-- fewest for which an always-ready downstream never holds the input back.
type QueueDepth ch l g b t e = 2 + Div (PipeDepth ch l g b t + e + 1) (g * b)

-- | Where the engine loads an accepted window from, and @e@, the cycles
-- after the accept it does so (its steps start the cycle after the load).
-- 'atAccept': the input beat itself, in the accept's cycle (@e = 0@).
-- 'afterAccept': a producer's register that still holds the accepted beat in
-- the cycle after (@e = 1@): "K2C.Window"'s shift register ('K2C.Window.
-- windowHeld'). A window generator offers a window through a multiplexer (the
-- waiting window or the one its last pixel is making), so loading the offer
-- puts that multiplexer, the pending flag, the line buffer's word and the
-- pixel before every bit of the engine's window: 2.2 LUT4 and a PFUMX per bit
-- on ECP5 (resnet_digits balanced to the LFE5U-85F: 12.1k of its 29.2k LUT4
-- and 5.2k of its 6.0k PFUMX in its four 3x3 convolutions' windows). Loaded
-- from the shift register, a window bit is the register's bit or the rotated
-- one, one LUT (that design: 547 PFUMX, 39.8k LUT4 packed against 46.7k); the
-- cost is one cycle of latency, not throughput (the accept rule stays: see
-- the module header).
newtype Loading dom (e :: Nat) i = Loading (Signal dom (Maybe i) -> Signal dom i)

-- | Load the accepted beat in the accept's cycle.
atAccept :: Loading dom 0 i
atAccept = Loading (fmap fromJustX)

-- | Load from @held@ in the cycle after the accept: @held@ must then still
-- show the accepted beat.
afterAccept :: Signal dom i -> Loading dom 1 i
afterAccept held = Loading (const held)

-- | The filter engine; see the module header for the schedule. @finish@ is
-- applied to each filter's final accumulator (requantize, then activate).
engine
  :: forall dom k f p b l ch g ai af wi wf bi bf ci cf o t mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , EngineShape k f p b ch g
     , KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> SNat l
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec k (SFixed ai af)) (Vec f o)
engine p b l = engineFrom p b l atAccept

-- | The filter engine loading its windows as @loading@ says ('Loading'):
-- 'engine' is it with 'atAccept'; behind a window generator, with
-- 'afterAccept' of the generator's shift register. One window shared by all
-- PEs, held as @b@ chunks in a rotating register.
engineFrom
  :: forall dom k f p b l ch g ai af wi wf bi bf ci cf o t e mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , EngineShape k f p b ch g
     , KnownNat l, TableRegs t, KnownNat e, e <= 1
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> SNat l
  -> Loading dom e (Vec k (SFixed ai af))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec k (SFixed ai af)) (Vec f o)
engineFrom SNat SNat l loading =
  engineWith @dom @(Vec k (SFixed ai af)) @(Vec b (Vec ch (SFixed ai af))) @f @p @b @l @ch @g
             l loading chunks (`rotateLeftS` d1) (\_ held -> repeat (current held))
  where
    current :: Vec b (Vec ch (SFixed ai af)) -> Vec ch (SFixed ai af)
    current = leToPlus @1 @b head

-- | The engine for any way of holding the window: @load@ turns an accepted
-- input into the held window, @next@ advances it after every step and must
-- give back the loaded window after @b@ steps (so every group sees the same
-- chunks), and @operands@ gives each PE the chunk it multiplies in this step
-- from the group counter and the held window. The schedule and timing are the
-- module header's, whatever these three functions are ('engine': one window
-- shared by all PEs; "K2C.Depthwise": each PE its own channel's window).
engineWith
  :: forall dom i held f p b l ch g ai af wi wf bi bf ci cf o t e mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , KnownNat f, KnownNat p, KnownNat b, KnownNat l, KnownNat ch, KnownNat g, TableRegs t
     , KnownNat e, e <= 1
     , 1 <= b, f <= (g * p), 1 <= (g * b)
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX held, NFDataX o )
  => SNat l
  -> Loading dom e i
  -> (i -> held)
  -> (held -> held)
  -> (Index g -> held -> Vec p (Vec ch (SFixed ai af)))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom i (Vec f o)
engineWith SNat (Loading source) load next operands weights finish (input, readyOut) = (output, ready ctl)
  where
    ctl = control @g @b @(QueueDepth ch l g b t e) @e (isJust <$> input) taken
    taken = (isJust <$> output) .&&. readyOut

    -- The window register has no enable: whenever the engine is open it loads
    -- the input (the window accepted, or one it does not use: a window is only
    -- read in the steps after its acceptance), otherwise it advances. Its
    -- select is the control's 'loadSelect' flip-flop, where an enable
    -- (accepted or busy) would be a LUT's output before every bit of a wide
    -- window (the thesis CNN at 130 multipliers on ECP5: conv_2's 2,304 bits,
    -- the critical path). No reset: the control says when it holds a window.
    window :: Signal dom held
    window = delay (deepErrorX "engine: no window yet")
                   (mux (loadSelect ctl) (load <$> source input) (next <$> window))

    complete = datapath @f @p @b @l @ch @g finish (stepTag ctl)
                 (operands <$> stepGroup ctl <*> window) (walkWeights weights (stepping ctl))
    (output, _) = fifo (SNat @(QueueDepth ch l g b t e)) (complete, readyOut)

-- | The window as @b@ chunks of @ch@ values, zero padded at the end (when
-- @k > b * ch@ the values past @b * ch@ would be dropped; 'EngineShape' rules
-- that out).
chunks
  :: forall k b ch a . (KnownNat k, KnownNat b, KnownNat ch, Num a)
  => Vec k a -> Vec b (Vec ch a)
chunks xs = unconcatI (takeI (xs ++ repeat @(b * ch) 0))
