{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The filter engine's control ("K2C.Engine"): when a window moves in, which step
the engine is in, and the tag that travels beside each step's data.

The engine is idle or busy with one window; busy, it takes one step per ROM
word, @S = G * b@ steps, one per cycle, and never stalls. Downstream stalls
reach it only through a credit count of the windows it holds (accepted, result
not yet taken from the output queue), at most @Q@ ('K2C.Engine.QueueDepth').

= Hardware

* counters: the word @Index (G * b)@, the chunk @Index b@, the group
  @Index G@ (all 0 when idle), a busy flag, the credit count @Index (Q + 1)@;
* flags, each registered from next values: @lastWord@, @room@ (fewer than
  @Q@ windows held), @open@ (idle or busy with the last word), @penult@ (the word
  counter at the last word but one), and with @e = 1@ @openAhead@.

= Why every output is a flip-flop or one LUT from flip-flops

* The input's ready travels upstream, often far across the chip (to a queue
  or a window generator), so it is @open@ (or @openAhead@) AND @room@: two
  flip-flops, not a counter's comparator (digits_dense on ECP5: a comparator
  there was a 12.3 ns path, 10.6 ns of it routing).
* @open@ is also the select of every bit of the window register (5,135 bits
  on inception_digits, copied 80 times), so its next value is a LUT or two
  from flip-flops and the input's valid: @lastWord@ and @open@ are registered
  from @penult@, not from the word counter's increment and comparison (that
  would be inception_digits' critical path on ECP5, 12.2 ns).
* With @e = 1@ ('K2C.Engine.afterAccept') the window is loaded, and the steps
  start, one cycle after the accept, so the input is ready when the engine
  will be open in the next cycle: @openAhead@, registered from the values
  busy and @lastWord@ will have in two cycles.
-}
module K2C.EngineControl
  ( Tag
  , idleTag
  , Control (..)
  , control
  ) where

import Clash.Prelude

import K2C.Fifo (nextCount)
import K2C.Window (nextIndex)

-- | What travels beside a step's data through the pipeline: the step is
-- real (valid), the first chunk of its group, the last chunk of its group,
-- the group, the window's last step.
type Tag g = (Bool, Bool, Bool, Index g, Bool)

-- | The tag of a cycle without a step (the reset value of the tag's
-- pipeline registers).
idleTag :: KnownNat g => Tag g
idleTag = (False, False, False, 0, False)

-- | The control's outputs.
data Control dom g = Control
  { ready      :: Signal dom Bool
    -- ^ the input's ready: registered state only, never the input's valid
    -- nor, combinationally, downstream's ready
  , loadSelect :: Signal dom Bool
    -- ^ idle or busy with the last word (a flip-flop): the window register
    -- loads the input beat, otherwise it advances to the next chunk
  , stepping   :: Signal dom Bool
    -- ^ this cycle is a step (the weight memory reads only then)
  , stepGroup  :: Signal dom (Index g)
    -- ^ the step's group
  , stepTag    :: Signal dom (Tag g)
    -- ^ the step's tag ('Tag')
  }

-- | The control of an engine with @g@ groups of @b@ steps, an output queue
-- of @q@ results and windows loaded @e@ cycles after their accept
-- ('K2C.Engine.Loading'), from the input's valid and whether a result moves
-- out of the queue in this cycle.
control
  :: forall g b q e dom
   . ( HiddenClockResetEnable dom
     , KnownNat g, KnownNat b, KnownNat q, KnownNat e, 1 <= b, 1 <= (g * b) )
  => Signal dom Bool
  -> Signal dom Bool
  -> Control dom g
control validIn taken = Control readyIn open busy group tag
  where
    -- Issue (reset). A busy cycle is a step: the engine never stalls. The
    -- counters wrap to 0 after the last word, so they are 0 when idle.
    busy     = register False busyNext
    word     = register (0 :: Index (g * b)) wordNext
    chunk    = register (0 :: Index b) (mux busy (nextIndex <$> chunk) chunk)
    group    = register (0 :: Index g) (mux (busy .&&. groupEnd) (nextIndex <$> group) group)
    groupEnd = (== maxBound) <$> chunk
    wordNext = mux busy (nextIndex <$> word) word
    busyNext = start .||. (busy .&&. (not <$> lastWord))

    -- Credits: windows accepted whose result has not left the queue.
    held     = register (0 :: Index (q + 1)) heldNext
    heldNext = nextCount <$> held <*> accepted <*> taken

    -- Input ready from three flip-flops (see the module header). The next
    -- word is the last one exactly when the engine is busy with the last but
    -- one (idle, the word counter is 0), so with @S >= 2@ both lastWord and
    -- open are registered from 'penult' (word == S - 2, itself registered
    -- from the next word).
    single   = natToNum @(g * b) == (1 :: Integer)
    penult   = if single then pure False else register (natToNum @(g * b) == (2 :: Integer))
                 ((== maxBound - 1) <$> wordNext)
    nextLast = if single then pure True else busy .&&. penult  -- wordNext == maxBound
    lastWord = register single nextLast
    room     = register True ((< maxBound) <$> heldNext)
    open     = register True ((not <$> busyNext) .||. nextLast)
    readyIn  = (if late then openAhead else open) .&&. room
    accepted = readyIn .&&. validIn

    -- Loading after the accept (e = 1): the steps start a cycle after the
    -- accept ('start'), and the input is ready when the engine will be open
    -- in the next cycle: openAhead, registered from the values busy and
    -- lastWord will have in two cycles (busy2, last2).
    late      = natToNum @e == (1 :: Integer)
    start     = if late then register False accepted else accepted
    busy2     = accepted .||. (busyNext .&&. (not <$> nextLast))
    last2     = if single then pure True else busyNext .&&. ((== maxBound - 1) <$> wordNext)
    openAhead = register True ((not <$> busy2) .||. last2)

    tag = bundle (busy, (== 0) <$> chunk, groupEnd, group, lastWord)
