{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The filter engine shared by dense and conv2d layers: one window of @K@ values
in, @F@ filter (neuron) results out, computed by @p@ processing elements (PEs)
that spend @b@ cycles on each group of @p@ filters.

= The two knobs

* @p@, @1 <= p <= F@: PEs, i.e. filters computed in parallel. The @F@ filters
  form @G = ceil(F / p)@ groups; group @g@ is filters @g*p .. g*p+p-1@ (in the
  last group, filters past @F@ are zero padding: computed, then dropped).
* @b@, @1 <= b <= K@: cycles a PE spends on one filter. The window, zero
  padded to @b * ch@ values, is cut into @b@ chunks of @ch = ceil(K / b)@
  values; a PE multiplies one chunk per cycle.

The weight ROM ("K2C.Memory") has @G * b@ words; word @g*b + t@ is what the PEs
need in the @t@-th cycle of group @g@, so the engine reads it in order, one
word per cycle. The arithmetic of one PE and one cycle, and the exact
accumulator contract (saturating order included), are in "K2C.Filter".
After the @b@-th chunk of a group each PE applies the layer's per-neuron
function (requantization and activation, 'K2C.Activation') to its
accumulator, in the same cycle, and the @p@ results are stored.

= Hardware

* multipliers: @p * ch@; adders: @p@ trees of @ch + 1@ terms and @p@
  accumulator adders with clamps ("K2C.Filter"); @p@ per-neuron functions;
* ROM: @G * b@ words of @p * (ch * BitSize w + BitSize bias)@ bits;
* registers: the window (@b * ch@ values, a rotating shift register: the
  current chunk is always its head, so no multiplexer picks chunks), @p@
  accumulators (unused, hence removed by synthesis, when @b = 1@), the result
  register @R@ (@G * p@ outputs, of which the @G * p - F@ padding ones are
  never read and removed by synthesis), the output register @O@ (@F@
  outputs), and
  control: counters @Index (G*b)@, @Index b@, @Index G@ and three flags.

= Protocol and exact timing

The engine is idle or busy with one window. Busy, it spends one /step/ per
ROM word, @G * b@ steps in all, normally one step per cycle. The registers:

* @R@ collects a window's groups as they finish. It can also hold one whole
  finished result that found @O@ occupied (flag @rFull@).
* @O@ is the output beat. It is /free/ in a cycle when it is empty or its beat
  moves in that cycle (downstream ready).

Rules, cycle by cycle:

* Input ready (registered state only) = idle, or busy with the last word and
  not @rFull@. A window moves in when ready and valid. The ROM address of
  word 0 is presented whenever the engine is idle or taking its last step, so
  word 0 is at the ROM output in the cycle after a window moves in.
* A busy cycle is a step unless it is the last cycle of a group, @rFull@ is
  set and @O@ is not free: then it /stalls/ (nothing changes; this is the only
  reason to stall).
* When @rFull@ and @O@ is free, @R@'s result moves into @O@ (a transfer).
* The last step of a window puts its complete result into @O@ if @O@ is free
  and @rFull@ is not set, otherwise into @R@ (setting @rFull@).

Consequences, with the window accepted in cycle @t@:

* steps in cycles @t + 1 .. t + G*b@ unless stalled;
* /latency/: when downstream was ready for the previous result (always the
  case with downstream always ready), the output is valid in cycle
  @t + G*b + 1@, and moves then if downstream is ready;
* /initiation interval/: the next window can move in in cycle @t + G*b@ (the
  last step), so with downstream always ready window @i@ moves in in cycle
  @a_i = max(v_i, a_(i-1) + G*b)@, @v_i@ being the first cycle it is offered,
  and its output moves in cycle @a_i + G*b + 1@. The engine never stalls then
  and @rFull@ is never set. One window every @G*b@ cycles, also for
  @G*b = 1@.
* with downstream stalls: @O@ and @R@ together hold two finished results; the
  window after them stalls at the end of its first group until @O@ moves.
  Input ready stays low while @rFull@, so a third window waits at the input.

Ready never depends on the input's valid nor, combinationally, on
downstream's ready. Output is the register @O@.

= Variants

'engineWith' is this engine for any way of holding the window and of
handing chunks to the PEs; 'engine' shares one window among all PEs, the
depthwise engine ("K2C.Depthwise") gives each PE its own channel's window.
Control, ROM walk, accumulators, result registers and hence every timing rule
above are the same code in both.
-}
module K2C.Engine
  ( CeilDiv
  , EngineShape
  , engine
  , engineWith
  , chunks
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Filter (Accumulates, filterStepEach)
import K2C.Memory (WeightRom, readWeights)
import K2C.Stream (Stream)

-- | @ceil(a / b)@ for @b >= 1@.
type CeilDiv a b = Div (a + b - 1) b

-- | The sizes of an engine with window length @k@, @f@ filters, @p@ PEs and
-- @b@ cycles per group: chunk length @ch = ceil(k / b)@ and @g = ceil(f / p)@
-- groups. The two inequalities are implied by the equalities but stated so
-- that the type checker can use them.
type EngineShape k f p b ch g =
  ( KnownNat k, KnownNat f, KnownNat p, KnownNat b, KnownNat ch, KnownNat g
  , 1 <= k, 1 <= f, 1 <= p, 1 <= b, p <= f, b <= k
  , ch ~ CeilDiv k b, g ~ CeilDiv f p
  , k <= (b * ch), f <= (g * p) )

-- | The filter engine; see the module header for the schedule. @finish@ is
-- applied to each filter's final accumulator (requantize, then activate).
engine
  :: forall dom k f p b ch g ai af wi wf bi bf ci cf o
   . ( HiddenClockResetEnable dom
     , EngineShape k f p b ch g
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> (SFixed ci cf -> o)
  -> Stream dom (Vec k (SFixed ai af)) (Vec f o)
engine SNat SNat =
  engineWith @dom @(Vec k (SFixed ai af)) @(Vec b (Vec ch (SFixed ai af))) @f @p @b @ch @g
             chunks (`rotateLeftS` d1) (\_ held -> repeat (current held))
  where
    current :: Vec b (Vec ch (SFixed ai af)) -> Vec ch (SFixed ai af)
    current = leToPlus @1 @b head

-- | The engine's control, ROM walk, PEs and result registers, for any way of
-- holding the window: @load@ turns an accepted input into the held window,
-- @next@ advances it after every step and must give back the loaded window
-- after @b@ steps (so every group sees the same chunks), and @operands@
-- gives each PE the chunk it multiplies in this step from the group counter
-- and the held window. The schedule and timing are the module header's,
-- whatever these three functions are ('engine': one window shared by all
-- PEs; "K2C.Depthwise": each PE its own channel's window).
engineWith
  :: forall dom i held f p b ch g ai af wi wf bi bf ci cf o
   . ( HiddenClockResetEnable dom
     , KnownNat f, KnownNat p, KnownNat b, KnownNat ch, KnownNat g
     , 1 <= b, f <= (g * p)
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX held, NFDataX o )
  => (i -> held)
  -> (held -> held)
  -> (Index g -> held -> Vec p (Vec ch (SFixed ai af)))
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> (SFixed ci cf -> o)
  -> Stream dom i (Vec f o)
engineWith load next operands weights finish (input, readyOut) = (output, readyIn)
  where
    -- Control (reset). The counters wrap to 0 after the last word, so they are
    -- 0 whenever the engine is idle.
    busy   = register False (accepted .||. (busy .&&. (not <$> (step .&&. lastWord))))
    word   = register (0 :: Index (g * b)) (mux step (wrap <$> word) word)
    chunk  = register (0 :: Index b) (mux step (wrap <$> chunk) chunk)
    group  = register (0 :: Index g) (mux (step .&&. groupEnd) (wrap <$> group) group)
    rFull  = register False ((done .&&. (not <$> direct)) .||. (rFull .&&. (not <$> transfer)))
    oValid = register False (transfer .||. direct .||. (oValid .&&. (not <$> readyOut)))

    lastWord = (== maxBound) <$> word
    groupEnd = (== maxBound) <$> chunk
    oFree    = (not <$> oValid) .||. readyOut
    stall    = busy .&&. groupEnd .&&. rFull .&&. (not <$> oFree)
    step     = busy .&&. (not <$> stall)
    done     = step .&&. lastWord           -- a window's last step
    transfer = rFull .&&. oFree             -- R's waiting result into O
    direct   = done .&&. (not <$> rFull) .&&. oFree

    readyIn  = (not <$> busy) .||. (lastWord .&&. (not <$> rFull))
    accepted = readyIn .&&. (isJust <$> input)

    -- The ROM word needed in the next cycle: the next one after a step (word 0
    -- after the last), the same one otherwise (idle: word 0).
    weightsWord = readWeights weights (mux step (wrap <$> word) word)

    -- Datapath registers have no reset: the control says what they hold.
    held :: Signal dom held
    held = delayEn (deepErrorX "engine: no window yet") (accepted .||. step)
                   (mux accepted (load . fromJustX <$> input) (next <$> held))

    sums :: Signal dom (Vec p (SFixed ci cf))
    sums = filterStepEach onlyChunk <$> ((== 0) <$> chunk) <*> (operands <$> group <*> held) <*> accs
                                    <*> weightsWord
    onlyChunk = natToNum @b == (1 :: Integer)
    accs = delayEn (deepErrorX "engine: no accumulator yet") step sums

    -- R as G groups of p results; group g's results replace its slot. The
    -- padding results of the last group are registered but never read, so
    -- synthesis removes them.
    finished  = map finish <$> sums
    results   = replace <$> group <*> finished <*> resultReg
    resultReg :: Signal dom (Vec g (Vec p o))
    resultReg = delayEn (deepErrorX "engine: no result yet") (step .&&. groupEnd) results

    outputReg = delayEn (deepErrorX "engine: no output yet") (transfer .||. direct)
                        (dropPadding <$> mux transfer resultReg results)
    output    = mux oValid (Just <$> outputReg) (pure Nothing)

-- | Successor that wraps to 0.
wrap :: KnownNat n => Index n -> Index n
wrap i = if i == maxBound then 0 else i + 1

-- | The window as @b@ chunks of @ch@ values, zero padded at the end (when
-- @k > b * ch@ the values past @b * ch@ would be dropped; 'EngineShape' rules
-- that out).
chunks
  :: forall k b ch a . (KnownNat k, KnownNat b, KnownNat ch, Num a)
  => Vec k a -> Vec b (Vec ch a)
chunks xs = unconcatI (takeI (xs ++ repeat @(b * ch) 0))

-- | The @f@ results in filter order (group 0 first), without the padding
-- filters of the last group.
dropPadding :: forall f p g o . (KnownNat f, f <= (g * p)) => Vec g (Vec p o) -> Vec f o
dropPadding groups = leToPlus @f @(g * p) (takeI (concat groups))
